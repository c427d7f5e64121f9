"""The traffic gate's holds: a sync's pause and a joining ingest's hold lift independently."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from parity.services.ingest.traffic_gate import JOIN_HOLD, TrafficGate
from parity.services.runtime.errors import DeadlineExceeded


async def admitted(gate: TrafficGate) -> bool:
    """Whether a request gets in now, by the gate's own counts rather than a timer: True once it has been in
    flight, False once it waits at the gate (counted as held); a request held gives up, as a client that goes
    away does."""
    entered = asyncio.Event()

    async def enter() -> None:
        async with gate.admit():
            entered.set()

    held_before = gate.held
    request = asyncio.ensure_future(enter())
    while not entered.is_set() and gate.held == held_before:
        await asyncio.sleep(0)
    if entered.is_set():
        await request
        return True
    request.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await request
    return False


async def test_lifting_the_join_hold_leaves_a_sync_pause_standing() -> None:
    gate = TrafficGate()
    gate.hold(JOIN_HOLD)
    assert gate.paused and gate.held_for(JOIN_HOLD)
    assert await gate.pause(1.0) == 0
    gate.release(JOIN_HOLD)
    assert gate.paused and not gate.held_for(JOIN_HOLD)
    assert not await admitted(gate)
    assert gate.resume() > 0
    assert not gate.paused and await admitted(gate)


async def test_resume_lifts_every_hold() -> None:
    gate = TrafficGate()
    gate.hold(JOIN_HOLD)
    gate.resume()
    assert not gate.paused and not gate.held_for(JOIN_HOLD) and await admitted(gate)
    # Releasing a hold that is gone changes nothing.
    gate.release(JOIN_HOLD)
    assert not gate.paused


async def test_a_held_request_enters_once_the_last_hold_lifts() -> None:
    gate = TrafficGate()
    gate.hold(JOIN_HOLD)
    entered = asyncio.Event()

    async def enter() -> None:
        async with gate.admit():
            entered.set()

    waiting = asyncio.ensure_future(enter())
    while not gate.held:
        await asyncio.sleep(0)
    assert not waiting.done() and gate.in_flight == 0
    gate.release(JOIN_HOLD)
    await waiting
    assert entered.is_set() and gate.held == 0


async def test_a_held_request_that_gives_up_is_no_longer_counted() -> None:
    gate = TrafficGate()
    await gate.pause(1.0)
    assert not await admitted(gate)
    assert gate.held == 0 and gate.in_flight == 0


async def test_a_pause_that_cannot_drain_stays_paused() -> None:
    gate = TrafficGate()
    async with gate.admit():
        with pytest.raises(DeadlineExceeded, match="1 requests still in flight"):
            await gate.pause(0.05)
    assert gate.paused

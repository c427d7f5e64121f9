"""The traffic gate's holds: a sync's pause and a joining ingest's hold lift independently."""

from __future__ import annotations

import asyncio

import pytest

from parity.services.ingest.traffic_gate import JOIN_HOLD, TrafficGate
from parity.services.runtime.errors import DeadlineExceeded


async def admitted(gate: TrafficGate, within_s: float = 0.05) -> bool:
    async def enter() -> None:
        async with gate.admit():
            pass

    try:
        await asyncio.wait_for(enter(), within_s)
    except TimeoutError:
        return False
    return True


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
    waiting = asyncio.ensure_future(admitted(gate, within_s=5.0))
    while not gate.held:
        await asyncio.sleep(0)
    assert not waiting.done() and gate.in_flight == 0
    gate.release(JOIN_HOLD)
    assert await waiting and gate.held == 0


async def test_a_held_request_that_gives_up_is_no_longer_counted() -> None:
    gate = TrafficGate()
    await gate.pause(1.0)
    assert not await admitted(gate, within_s=0.01)
    assert gate.held == 0 and gate.in_flight == 0


async def test_a_pause_that_cannot_drain_stays_paused() -> None:
    gate = TrafficGate()
    async with gate.admit():
        with pytest.raises(DeadlineExceeded, match="1 requests still in flight"):
            await gate.pause(0.05)
    assert gate.paused

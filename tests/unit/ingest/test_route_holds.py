"""A run's route hold: only requests for its model wait, and its drain waits only for them."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from parity.services.ingest.traffic_gate import SYNC_HOLD, TrafficGate, admit_route
from parity.services.runtime.errors import DeadlineExceeded


class Request:
    """A request for `model` as http_api and the backend make it: admitted by the gate, then by its model's
    route; it stays in flight until `finish()`."""

    def __init__(self, gate: TrafficGate, model: str) -> None:
        self.entered = asyncio.Event()
        self._finish = asyncio.Event()
        self.task = asyncio.ensure_future(self._run(gate, model))

    async def _run(self, gate: TrafficGate, model: str) -> None:
        async with gate.admit():
            await admit_route(model)
            self.entered.set()
            await self._finish.wait()

    def finish(self) -> None:
        self._finish.set()

    async def settled(self, gate: TrafficGate, held_before: int) -> bool:
        """True once the request is in flight, False once it waits (counted as held)."""
        while not self.entered.is_set() and gate.held == held_before:
            await asyncio.sleep(0)
        return self.entered.is_set()

    async def give_up(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def started(gate: TrafficGate, model: str) -> Request:
    request = Request(gate, model)
    assert await request.settled(gate, gate.held)
    return request


async def test_a_routes_hold_holds_only_its_model() -> None:
    gate = TrafficGate()
    assert await gate.pause_route("run-a", 1.0) == 0
    assert gate.route_paused("run-a") and not gate.route_paused("run-b") and not gate.paused
    held = Request(gate, "run-a")
    assert not await held.settled(gate, 0) and gate.held == 1
    # Waiting at its route's hold, the request is out of the gate's flight.
    assert gate.in_flight == 0 and gate.route_hold("run-a").in_flight == 0
    other = await started(gate, "run-b")
    assert gate.in_flight == 1
    assert gate.resume_route("run-a") > 0 and not gate.route_paused("run-a")
    await held.entered.wait()
    assert gate.held == 0 and gate.in_flight == 2 and gate.route_hold("run-a").in_flight == 1
    held.finish()
    other.finish()
    await asyncio.gather(held.task, other.task)
    # Idle and not held, a model is forgotten: whatever names requests make up, the table stays small.
    assert gate.in_flight == 0 and not gate._routes


async def test_a_routes_drain_waits_for_its_own_requests_only() -> None:
    gate = TrafficGate()
    mine, theirs = await started(gate, "run-a"), await started(gate, "run-b")
    pausing = asyncio.ensure_future(gate.pause_route("run-a", 5.0))
    await asyncio.sleep(0)
    assert not pausing.done() and gate.route_paused("run-a")
    mine.finish()
    assert await pausing == 1
    # The other run's request is still in flight: it never held the pause up.
    assert not theirs.task.done() and gate.route_hold("run-b").in_flight == 1
    theirs.finish()
    await asyncio.gather(mine.task, theirs.task)


async def test_a_routes_drain_times_out_and_its_hold_stands() -> None:
    gate = TrafficGate()
    mine = await started(gate, "run-a")
    with pytest.raises(DeadlineExceeded, match="1 requests for 'run-a' still in flight"):
        await gate.pause_route("run-a", 0.01)
    assert gate.route_paused("run-a")
    mine.finish()
    await mine.task


async def test_a_pause_of_all_traffic_does_not_wait_for_requests_held_at_a_route() -> None:
    gate = TrafficGate()
    await gate.pause_route("run-a", 1.0)
    held = Request(gate, "run-a")
    assert not await held.settled(gate, 0)
    assert await asyncio.wait_for(gate.pause(1.0), 1.0) == 0
    # Lifting the route's hold alone leaves the global pause standing: the request waits on at the gate.
    gate.resume_route("run-a")
    for _ in range(5):
        await asyncio.sleep(0)
    assert not held.entered.is_set() and gate.paused and gate.held == 1
    gate.resume()
    await held.entered.wait()
    held.finish()
    await held.task


async def test_resume_lifts_the_global_hold_and_every_routes() -> None:
    gate = TrafficGate()
    gate.hold(SYNC_HOLD)
    await gate.pause_route("run-a", 1.0)
    await gate.pause_route("run-b", 1.0)
    assert gate.resume() > 0
    assert not gate.paused and not gate.route_paused("run-a") and not gate.route_paused("run-b")
    request = await started(gate, "run-a")
    request.finish()
    await request.task
    assert gate.resume_route("run-a") == 0.0 and gate.resume_route("never-held") == 0.0


async def test_a_request_held_at_a_route_that_gives_up_is_no_longer_counted() -> None:
    gate = TrafficGate()
    await gate.pause_route("run-a", 1.0)
    held = Request(gate, "run-a")
    assert not await held.settled(gate, 0)
    await held.give_up()
    assert gate.held == 0 and gate.in_flight == 0 and gate.route_hold("run-a").in_flight == 0


async def test_outside_an_admission_a_route_admits_at_once() -> None:
    gate = TrafficGate()
    await gate.pause_route("run-a", 1.0)
    await asyncio.wait_for(admit_route("run-a"), 1.0)


async def test_requests_let_in_by_a_resume_are_drained_by_the_next_pause() -> None:
    gate = TrafficGate()
    await gate.pause_route("run-a", 1.0)
    first = Request(gate, "run-a")
    assert not await first.settled(gate, 0)
    second = Request(gate, "run-a")
    assert not await second.settled(gate, 1)
    gate.resume_route("run-a")
    await asyncio.gather(first.entered.wait(), second.entered.wait())
    pausing = asyncio.ensure_future(gate.pause_route("run-a", 5.0))
    await asyncio.sleep(0)
    assert not pausing.done()
    first.finish()
    second.finish()
    assert await pausing == 2
    gate.resume()
    assert not gate._routes

"""ReadDeadlines on a virtual clock: when a wait times out is the sweep's arithmetic, not the machine's load."""

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from parity.services.ingest.upstream.http_pool import ReadDeadlines

T = TypeVar("T")
# What adding up ticks in floating point may lose (0.02 ten times is not 0.2): far below a tick, no time at all.
ROUNDING_S = 1e-9


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when the loop would wait, by exactly what it would wait: the next
    timer fires at once, at its own time on this clock, however busy the machine is. No I/O is faked: a loop
    with nothing scheduled waits on its selector as any loop does (pytest-timeout stops a test that hangs so)."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0
        select = self._selector.select  # type: ignore[attr-defined]

        def advance(timeout: float | None = None) -> list[Any]:
            events = select(0)
            if not events and timeout is not None:
                self._now += timeout
            return events or (select(None) if timeout is None else [])

        self._selector.select = advance  # type: ignore[attr-defined]

    def time(self) -> float:
        return self._now


def on_virtual_clock(coroutine: Coroutine[Any, Any, T]) -> T:
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


async def timed_out_after(deadlines: ReadDeadlines, future: asyncio.Future[None]) -> float:
    """How long `deadlines.wait(future)` took to raise TimeoutError, on the running loop's clock."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await deadlines.wait(future)
    return loop.time() - started


def test_a_wait_that_stalls_times_out_within_a_tick_of_its_deadline() -> None:
    async def stall() -> tuple[float, float]:
        deadlines = ReadDeadlines(0.2)
        return await timed_out_after(
            deadlines, asyncio.get_running_loop().create_future()
        ), deadlines.tick_s

    waited, tick_s = on_virtual_clock(stall())
    assert 0.2 - ROUNDING_S <= waited <= 0.2 + tick_s + ROUNDING_S, waited


def test_each_wait_has_its_own_deadline_and_answered_waits_are_forgotten() -> None:
    async def overlapping_waits() -> None:
        deadlines = ReadDeadlines(0.3)
        loop = asyncio.get_running_loop()
        answered = loop.create_future()
        first = asyncio.ensure_future(timed_out_after(deadlines, loop.create_future()))
        await asyncio.sleep(0.15)
        later = asyncio.ensure_future(timed_out_after(deadlines, loop.create_future()))
        answered_wait = asyncio.ensure_future(deadlines.wait(answered))
        loop.call_later(0.05, answered.set_result, None)
        await answered_wait
        first_waited = await first
        assert not later.done()  # its deadline is 0.15 s after the first's
        later_waited = await later
        for waited in (first_waited, later_waited):
            assert 0.3 - ROUNDING_S <= waited <= 0.3 + deadlines.tick_s + ROUNDING_S, waited
        # Nothing waits: the sweep is no longer scheduled, so an idle pool costs no timer.
        await asyncio.sleep(2 * deadlines.tick_s)
        assert deadlines._sweep_at is None and not deadlines._waiting

    on_virtual_clock(overlapping_waits())


async def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    deadlines = ReadDeadlines(5)
    waiting = asyncio.ensure_future(deadlines.wait(asyncio.get_running_loop().create_future()))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not deadlines._waiting

import asyncio
import time

import pytest

from parity.services.ingest.upstream.http_pool import ReadDeadlines


async def test_a_wait_that_stalls_times_out_within_a_tick_of_its_deadline() -> None:
    deadlines = ReadDeadlines(0.2)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await deadlines.wait(asyncio.get_running_loop().create_future())
    assert 0.2 <= time.monotonic() - started < 0.2 + deadlines.tick_s + 0.1


async def test_each_wait_has_its_own_deadline_and_answered_waits_are_forgotten() -> None:
    deadlines = ReadDeadlines(0.3)
    loop = asyncio.get_running_loop()
    answered, stalled = loop.create_future(), loop.create_future()
    first = asyncio.ensure_future(deadlines.wait(stalled))
    await asyncio.sleep(0.15)
    later = asyncio.ensure_future(deadlines.wait(loop.create_future()))
    answered_wait = asyncio.ensure_future(deadlines.wait(answered))
    loop.call_later(0.05, answered.set_result, None)
    await answered_wait
    with pytest.raises(TimeoutError):
        await first
    assert not later.done()  # its deadline is 0.15 s after the first's
    with pytest.raises(TimeoutError):
        await later
    # Nothing waits: the sweep is no longer scheduled, so an idle pool costs no timer.
    await asyncio.sleep(2 * deadlines.tick_s)
    assert deadlines._sweep_at is None and not deadlines._waiting


async def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    deadlines = ReadDeadlines(5)
    waiting = asyncio.ensure_future(deadlines.wait(asyncio.get_running_loop().create_future()))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not deadlines._waiting

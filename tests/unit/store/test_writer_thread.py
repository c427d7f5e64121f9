import asyncio
import threading
import time

import pytest

from parity.services.store.writer_thread import WriterThread


async def test_work_runs_in_submission_order_on_one_thread() -> None:
    writer = WriterThread("test-writer")
    ran: list[tuple[int, str]] = []

    def work(n: int) -> int:
        # Later submissions must wait for earlier ones, however long those take.
        time.sleep(0.01 if n == 0 else 0)
        ran.append((n, threading.current_thread().name))
        return n * 10

    try:
        results = await asyncio.gather(*(writer.run(work, n) for n in range(5)))
    finally:
        writer.close()
    assert results == [0, 10, 20, 30, 40]
    assert ran == [(n, "test-writer") for n in range(5)]


async def test_an_error_reaches_its_waiter_and_the_thread_goes_on() -> None:
    writer = WriterThread("test-writer")

    def fail() -> None:
        raise ValueError("disk on fire")

    try:
        with pytest.raises(ValueError, match="disk on fire"):
            await writer.run(fail)
        assert await writer.run(lambda: "still serving") == "still serving"
    finally:
        writer.close()


async def test_a_cancelled_waiter_leaves_the_work_to_finish() -> None:
    writer = WriterThread("test-writer")
    release, finished = threading.Event(), threading.Event()

    def slow() -> None:
        release.wait(5)
        finished.set()

    try:
        waiter = asyncio.ensure_future(writer.run(slow))
        await asyncio.sleep(0.01)
        waiter.cancel()
        release.set()
        # The next submission still runs, and only after the cancelled one has completed.
        assert await writer.run(finished.is_set) is True
        assert waiter.cancelled()
    finally:
        writer.close()


def test_close_runs_what_was_submitted_then_ends_the_thread() -> None:
    writer = WriterThread("test-writer")
    ran: list[int] = []

    async def submit_and_close() -> None:
        # Submitted, not awaited: close() must still run it.
        pending = asyncio.ensure_future(writer.run(ran.append, 1))
        await asyncio.sleep(0)
        await asyncio.to_thread(writer.close)
        await pending

    asyncio.run(submit_and_close())
    assert ran == [1]
    assert not writer._thread.is_alive()

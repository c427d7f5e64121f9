"""The one thread that runs the store's write transactions, in the order submitted.

A thread of its own rather than `asyncio.to_thread` per transaction: the executor's
bookkeeping and future chaining add CPU to every small write, which on a small host is
latency for every write behind it (measurements: docs/design/store-writer-thread.md).
It also keeps the backend's writer connection on one thread for its whole life.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_Work = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class WriterThread:
    def __init__(self, name: str) -> None:
        self._inbox: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)`, run on the thread once everything submitted before it has run."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._inbox.put((loop, future, function, args))
        return await future

    def close(self) -> None:
        """Run what was submitted, then end the thread."""
        self._inbox.put(None)
        self._thread.join()

    def _serve(self) -> None:
        while (work := self._inbox.get()) is not None:
            loop, future, function, args = work
            try:
                outcome: tuple[Any, BaseException | None] = (function(*args), None)
            except BaseException as error:  # noqa: BLE001 - the waiter hears about it
                outcome = (None, error)
            loop.call_soon_threadsafe(_resolve, future, *outcome)


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # Its waiter was cancelled meanwhile.
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)

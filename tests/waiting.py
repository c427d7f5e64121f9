"""Waiting on a real signal in tests: poll a condition until it holds, or fail naming it."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


# The value returned is truthy, so never None: a condition that returns an Optional waits for the value itself.
def eventually(condition: Callable[[], T | None], *, timeout_s: float = 30.0, interval_s: float = 0.05,
               what: str | Callable[[], str] = "the condition") -> T:  # fmt: skip
    """The first truthy value `condition()` returns; AssertionError naming `what` once `timeout_s` has passed.

    `condition` may fail the test itself (a process that exited); `what` may be a function, called only on
    timeout, for a message that needs reading then (a log's tail)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if value := condition():
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what() if callable(what) else what} did not hold within {timeout_s:g} s"
            )
        time.sleep(interval_s)


@overload
async def eventually_async(condition: Callable[[], Awaitable[T | None]], *, timeout_s: float = 30.0,
                           interval_s: float = 0.05, what: str | Callable[[], str] = "the condition") -> T: ...  # fmt: skip
@overload
async def eventually_async(condition: Callable[[], T | None], *, timeout_s: float = 30.0,
                           interval_s: float = 0.05, what: str | Callable[[], str] = "the condition") -> T: ...  # fmt: skip
async def eventually_async(condition: Callable[[], Any], *, timeout_s: float = 30.0,
                           interval_s: float = 0.05, what: str | Callable[[], str] = "the condition") -> Any:  # fmt: skip
    """eventually() for a test on an event loop: `condition` may be a coroutine function, and the loop runs on
    (the store's background tasks, say) between polls."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what() if callable(what) else what} did not hold within {timeout_s:g} s"
            )
        await asyncio.sleep(interval_s)

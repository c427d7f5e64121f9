"""Wakes the batch feeds when what they wait on changes: a close, a score, an acknowledgement,
credit, a feed ending; and, with no change at all, when the next idle group is due."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

MAX_WAIT_S = 5.0


class Changes:
    def __init__(self, next_due: Callable[[], float | None]) -> None:
        """`next_due`: the monotonic time the next group waiting for its idle release is due, or None."""
        self.next_due = next_due
        self.event = asyncio.Event()

    def notify(self) -> None:
        """Wake everyone waiting on the current event."""
        self.event.set()
        self.event = asyncio.Event()

    async def wait(self, event: asyncio.Event) -> None:
        """Until `event` (taken before looking) fires or the next idle group is due, at most MAX_WAIT_S."""
        now = time.monotonic()
        due = self.next_due()
        timeout = MAX_WAIT_S if due is None else min(max(due - now, 0.01), MAX_WAIT_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout=timeout)

"""A lock handed out in the order it was asked for, which tells each holder how long it waited.

Runs trained at once on one base model take turns on it: a plain lock lets the thread that
just released it take it again before a waiting one wakes, so one run's steps could starve
another's. Each run's step metrics report its wait (`base_wait_seconds`).
"""

from __future__ import annotations

import threading
import time
from types import TracebackType


class FairLock:
    def __init__(self) -> None:
        self._turns = threading.Condition()
        self._next_ticket = 0
        self._serving = 0
        self._waited = threading.local()

    def acquire(self) -> float:
        """Wait for this caller's turn; returns the seconds it waited."""
        started = time.perf_counter()
        with self._turns:
            ticket = self._next_ticket
            self._next_ticket += 1
            while ticket != self._serving:
                self._turns.wait()
        waited = time.perf_counter() - started
        self._waited.seconds = waited
        return waited

    def release(self) -> None:
        with self._turns:
            self._serving += 1
            self._turns.notify_all()

    @property
    def last_wait_s(self) -> float:
        """How long this thread waited for its latest turn."""
        return float(getattr(self._waited, "seconds", 0.0))

    def __enter__(self) -> FairLock:
        self.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.release()

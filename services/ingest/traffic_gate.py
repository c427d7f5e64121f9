"""Pausing traffic for a weight sync: new requests wait, in-flight ones finish."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from parity.services.runtime.errors import DeadlineExceeded


class TrafficGate:
    def __init__(self) -> None:
        self.in_flight = 0
        self.paused_since: float | None = None
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def paused(self) -> bool:
        return self.paused_since is not None

    @asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        """Hold the request while paused, then count it in flight until it finishes."""
        if not self._open.is_set():
            await self._open.wait()
        self.in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()

    async def pause(self, drain_timeout_s: float) -> int:
        """Stop admitting; return once nothing is in flight. Stays paused on timeout."""
        self._open.clear()
        if self.paused_since is None:
            self.paused_since = time.time()
        draining = self.in_flight
        try:
            await asyncio.wait_for(self._idle.wait(), drain_timeout_s)
        except TimeoutError:
            raise DeadlineExceeded(
                f"{self.in_flight} requests still in flight after {drain_timeout_s:g} s; traffic stays paused"
            ) from None
        return draining

    def resume(self) -> float:
        """Admit again; returns how long traffic was paused (0 if it was not)."""
        paused_for = time.time() - self.paused_since if self.paused_since is not None else 0.0
        self.paused_since = None
        self._open.set()
        return paused_for

"""Pausing traffic: new requests wait, in-flight ones finish.

A weight sync pauses (and drains); an ingest joining a paused fleet holds its traffic
until the fleet resumes. Each is a hold of its own, so lifting one never opens the gate
while the other still stands; the trainer's resume lifts every hold.
"""

from __future__ import annotations

import asyncio
import time
from types import TracebackType

from parity.services.runtime.errors import DeadlineExceeded

SYNC_HOLD = "weight sync"
JOIN_HOLD = "joining a paused fleet"


class TrafficGate:
    def __init__(self) -> None:
        self.in_flight = 0
        # Requests waiting at the gate for a hold to lift.
        self.held = 0
        self.paused_since: float | None = None
        self._holds: set[str] = set()
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def paused(self) -> bool:
        return self.paused_since is not None

    def admit(self) -> _Admission:
        """`async with gate.admit():` holds the request while paused, then counts it in
        flight until it finishes."""
        return _Admission(self)

    async def _enter(self) -> None:
        if not self._open.is_set():
            self.held += 1
            try:
                await self._open.wait()
            finally:
                self.held -= 1
        self.in_flight += 1
        self._idle.clear()

    def _leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    def hold(self, reason: str) -> None:
        """Stop admitting until `release(reason)` or `resume()`; requests in flight carry on."""
        self._holds.add(reason)
        self._open.clear()
        if self.paused_since is None:
            self.paused_since = time.time()

    def release(self, reason: str) -> None:
        """Lift one hold; traffic flows once none is left."""
        self._holds.discard(reason)
        if not self._holds:
            self.resume()

    def held_for(self, reason: str) -> bool:
        return reason in self._holds

    async def pause(self, drain_timeout_s: float) -> int:
        """Stop admitting; return once nothing is in flight. Stays paused on timeout."""
        self.hold(SYNC_HOLD)
        draining = self.in_flight
        try:
            await asyncio.wait_for(self._idle.wait(), drain_timeout_s)
        except TimeoutError:
            raise DeadlineExceeded(
                f"{self.in_flight} requests still in flight after {drain_timeout_s:g} s; traffic stays paused"
            ) from None
        return draining

    def resume(self) -> float:
        """Lift every hold and admit again; returns how long traffic was paused (0 if it was not)."""
        paused_for = time.time() - self.paused_since if self.paused_since is not None else 0.0
        self._holds.clear()
        self.paused_since = None
        self._open.set()
        return paused_for


class _Admission:
    """A plain async context manager: on the hot path, cheaper than @asynccontextmanager."""

    __slots__ = ("gate",)

    def __init__(self, gate: TrafficGate) -> None:
        self.gate = gate

    async def __aenter__(self) -> None:
        await self.gate._enter()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.gate._leave()

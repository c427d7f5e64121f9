"""One model name's own hold: a run's weight sync pauses its route's traffic only.

Every request for a served model is counted in its model's flight for as long as the
whole exchange lasts (its stream included; see TrafficGate.admit), so pausing one
run's route drains that run's requests and no one else's. While the route is held,
new requests for it wait; requests for every other model flow.
"""

from __future__ import annotations

import asyncio
import time

from parity.services.runtime.errors import DeadlineExceeded


class RouteHold:
    def __init__(self, model: str) -> None:
        self.model = model
        self.in_flight = 0
        self.paused_since: float | None = None
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def paused(self) -> bool:
        return self.paused_since is not None

    async def wait_open(self) -> None:
        await self._open.wait()

    def enter(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    def hold(self) -> None:
        self._open.clear()
        if self.paused_since is None:
            self.paused_since = time.time()

    async def pause(self, drain_timeout_s: float) -> int:
        """Hold; return once none of this model's requests is in flight. Stays held on timeout."""
        self.hold()
        draining = self.in_flight
        try:
            await asyncio.wait_for(self._idle.wait(), drain_timeout_s)
        except TimeoutError:
            raise DeadlineExceeded(
                f"{self.in_flight} requests for {self.model!r} still in flight after {drain_timeout_s:g} s;"
                " its traffic stays paused"
            ) from None
        return draining

    def resume(self) -> float:
        """Admit again; returns how long this model was held (0 if it was not)."""
        paused_for = time.time() - self.paused_since if self.paused_since is not None else 0.0
        self.paused_since = None
        self._open.set()
        return paused_for

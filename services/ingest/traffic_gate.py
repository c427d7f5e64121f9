"""Pausing traffic: new requests wait, in-flight ones finish.

A weight sync pauses (and drains); an ingest joining a paused fleet holds its traffic
until the fleet resumes. Each is a hold of its own, so lifting one never opens the gate
while the other still stands; the trainer's resume lifts every hold.

A run's weight sync, where several runs share the replicas, holds only its route's
model (route_holds.py): the backend names the model once it has read the request
(`admit_route`), and the request's admission then counts it in that model's flight too.
"""

from __future__ import annotations

import asyncio
import time
from contextvars import ContextVar, Token
from types import TracebackType

from parity.services.ingest.route_holds import RouteHold
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
        # By model name: the models held, or with requests in flight.
        self._routes: dict[str, RouteHold] = {}

    @property
    def paused(self) -> bool:
        return self.paused_since is not None

    def admit(self) -> _Admission:
        """`async with gate.admit():` holds the request while paused, then counts it in
        flight until it finishes; `admit_route` within it does the same for its model."""
        return _Admission(self)

    def route_hold(self, model: str) -> RouteHold:
        hold = self._routes.get(model)
        if hold is None:
            hold = self._routes[model] = RouteHold(model)
        return hold

    def _forget_if_idle(self, hold: RouteHold) -> None:
        """Keep only the models held or in flight: whatever names requests make up, the table stays small."""
        if not hold.in_flight and not hold.paused and self._routes.get(hold.model) is hold:
            del self._routes[hold.model]

    def route_paused(self, model: str) -> bool:
        hold = self._routes.get(model)
        return hold is not None and hold.paused

    async def pause_route(self, model: str, drain_timeout_s: float) -> int:
        """Stop admitting requests for `model`; return once none of them is in flight. Stays paused on timeout."""
        return await self.route_hold(model).pause(drain_timeout_s)

    def resume_route(self, model: str) -> float:
        """Lift `model`'s hold only; returns how long it was held (0 if it was not)."""
        hold = self._routes.get(model)
        if hold is None:
            return 0.0
        paused_for = hold.resume()
        self._forget_if_idle(hold)
        return paused_for

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
        """Lift every hold, every route's too, and admit again; returns the longest any of them stood (0 if none
        did)."""
        paused_for = time.time() - self.paused_since if self.paused_since is not None else 0.0
        self._holds.clear()
        self.paused_since = None
        self._open.set()
        for hold in list(self._routes.values()):
            paused_for = max(paused_for, hold.resume())
            self._forget_if_idle(hold)
        return paused_for


_admission: ContextVar[_Admission | None] = ContextVar("parity_ingest_admission", default=None)


async def admit_route(model: str) -> None:
    """Within a request's admission (`gate.admit()`): wait while `model` is held, then count the request in
    `model`'s flight until the admission ends. Outside one (a backend driven on its own), nothing."""
    admission = _admission.get()
    if admission is not None and admission.route is None:
        await admission.enter_route(model)


class _Admission:
    """A plain async context manager: on the hot path, cheaper than @asynccontextmanager."""

    __slots__ = ("gate", "route", "counted", "_token")

    def __init__(self, gate: TrafficGate) -> None:
        self.gate = gate
        self.route: RouteHold | None = None
        self.counted = False
        self._token: Token[_Admission | None] | None = None

    async def __aenter__(self) -> None:
        await self.gate._enter()
        self.counted = True
        self._token = _admission.set(self)

    async def enter_route(self, model: str) -> None:
        gate = self.gate
        # Looked up afresh after every wait: a hold lifted and forgotten meanwhile is not this model's any more.
        while (hold := gate.route_hold(model)).paused:
            # Waiting here, the request is out of the gate's flight: a pause of all traffic does not wait for it.
            gate._leave()
            self.counted = False
            gate.held += 1
            try:
                await hold.wait_open()
            finally:
                gate.held -= 1
            await gate._enter()
            self.counted = True
        hold.enter()
        self.route = hold

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _admission.reset(self._token)
        if self.counted:
            self.gate._leave()
        if self.route is not None:
            self.route.leave()
            self.gate._forget_if_idle(self.route)

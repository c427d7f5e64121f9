"""Operating the proxy: stats, replicas, pausing traffic, the policy version."""

from __future__ import annotations

import time
from dataclasses import dataclass

from parity.services.ingest.capture.capture_sink import CaptureSink
from parity.services.ingest.capture.policy_record import PolicyRecord, RecordedPolicy, RecordedRoute
from parity.services.ingest.chat_backend import PolicyState
from parity.services.ingest.traffic_gate import JOIN_HOLD, TrafficGate
from parity.services.ingest.upstream.replica_router import Replica, ReplicaRouter
from parity.services.runtime.errors import InvalidArgument


@dataclass(frozen=True)
class RouteStats:
    policy_model: str
    lora_adapter: str
    policy_version: int
    paused: bool


@dataclass(frozen=True)
class IngestStats:
    request_count: int
    error_count: int
    in_flight: int
    held: int
    capture_queue_depth: int
    spool_size: int
    captured_call_count: int
    paused: bool
    joining: bool
    policy_version: int
    start_time: float
    policy_model: str
    lora_adapter: str
    canary_share: float = 0.0
    canary_policy_version: int = 0
    canary_upstreams: tuple[str, ...] = ()
    routes: tuple[RouteStats, ...] = ()


class IngestControl:
    def __init__(
        self,
        gate: TrafficGate,
        router: ReplicaRouter,
        sink: CaptureSink,
        policy: PolicyState,
        record: PolicyRecord,
    ) -> None:
        self.gate = gate
        self.router = router
        self.sink = sink
        self.policy = policy
        self.record = record
        self.start_time = time.time()

    def stats(self) -> IngestStats:
        canary = self.policy.canary.current
        return IngestStats(
            request_count=sum(r.request_count for r in self.router.replicas),
            error_count=sum(r.error_count for r in self.router.replicas),
            in_flight=self.gate.in_flight,
            held=self.gate.held,
            capture_queue_depth=self.sink.queue_depth,
            spool_size=self.sink.spool.count,
            captured_call_count=self.sink.captured,
            paused=self.gate.paused,
            joining=self.gate.held_for(JOIN_HOLD),
            policy_version=self.policy.version,
            start_time=self.start_time,
            policy_model=self.policy.adapter.model,
            lora_adapter=self.policy.adapter.adapter,
            canary_share=canary.share if canary else 0.0,
            canary_policy_version=canary.policy_version if canary else 0,
            canary_upstreams=tuple(canary.upstreams) if canary else (),
            routes=tuple(
                RouteStats(r.model, r.adapter, r.version, self.gate.route_paused(r.model))
                for r in self.policy.routes.all()
            ),
        )

    def replicas(self, model: str) -> list[Replica]:
        return [r for r in self.router.replicas if not model or model in r.models]

    async def pause(self, drain_timeout_s: float, policy_model: str = "") -> tuple[int, float]:
        """Hold all traffic, or only requests for `policy_model` (one run's route), and drain what the hold
        covers; returns how many requests were in flight and when the hold began."""
        if drain_timeout_s <= 0:
            raise InvalidArgument(f"drain_timeout must be positive, got {drain_timeout_s:g} s")
        if policy_model:
            hold = self.gate.route_hold(policy_model)
            drained = await hold.pause(drain_timeout_s)
            assert hold.paused_since is not None
            return drained, hold.paused_since
        drained = await self.gate.pause(drain_timeout_s)
        assert self.gate.paused_since is not None
        return drained, self.gate.paused_since

    def resume(self, policy_model: str = "") -> float:
        """Lift the hold on `policy_model`'s route only, or, with none named, every hold."""
        return self.gate.resume_route(policy_model) if policy_model else self.gate.resume()

    async def set_canary(self, upstreams: list[str], share: float, policy_version: int) -> None:
        await self.policy.canary.set(
            upstreams, share, policy_version, current_version=self.policy.version
        )

    def set_policy_version(
        self, version: int, policy_model: str, lora_adapter: str, route: bool = False
    ) -> int:
        """The version, and the adapter serving `policy_model` from now on (none when `lora_adapter` is empty);
        with `route`, those of `policy_model`'s route only (policy_routes.py). Returns the previous version."""
        if route:
            previous = self.policy.routes.set(policy_model, lora_adapter, version)
            self.record.save_route(RecordedRoute(policy_model, lora_adapter, version))
            return previous
        if version < self.policy.version:
            raise InvalidArgument(
                f"policy_version {version} is lower than the current {self.policy.version}"
            )
        self.policy.adapter.set(policy_model, lora_adapter)
        previous, self.policy.version = self.policy.version, version
        self.record.save(
            RecordedPolicy(version, self.policy.adapter.model, self.policy.adapter.adapter)
        )
        return previous

    def adopt(self, version: int, policy_model: str, lora_adapter: str) -> bool:
        """Take on a peer's or the record's policy when it is newer than this ingest's."""
        if version <= self.policy.version:
            return False
        self.set_policy_version(version, policy_model, lora_adapter)
        return True

    def adopt_route(self, version: int, policy_model: str, lora_adapter: str) -> bool:
        """Take on a peer's or the record's route when it is newer than this ingest's (or this one has none)."""
        current = self.policy.routes.get(policy_model)
        if current is not None and version <= current.version:
            return False
        self.set_policy_version(version, policy_model, lora_adapter, route=True)
        return True

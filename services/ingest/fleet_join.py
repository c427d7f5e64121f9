"""An ingest starting beside others takes on their policy state before it serves.

With --peers (the other ingests: addresses or a dns:/// name, the trainer's list), a
starting ingest asks every peer it reaches for its stats before its HTTP port opens,
so no agent is served at a stale version. It adopts the highest policy version and the
adapter that goes with it, and each run's route at the highest version a peer reports.
If a peer is paused, a weight sync is under way: the new ingest starts held, and
resumes on its own once no peer is paused any more (taking on the version the sync
set), or as soon as the trainer, which may have found it meanwhile, resumes it. A
peer that is itself joining does not count as paused, so ingests restarted together
do not wait on each other.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import grpc
import structlog

from parity.api.ingest.v1 import ingest_service_pb2 as pb
from parity.clients import AsyncIngestClient, RPCError
from parity.services.ingest.control import IngestControl
from parity.services.ingest.traffic_gate import JOIN_HOLD
from parity.services.runtime.addresses import AddressSet, UnresolvedAddress

log = structlog.get_logger(__name__)

# Not answering yet, or not any more: the peer is left out of this survey.
GONE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


@dataclass
class PeerView:
    """What the peers that answered report; the newest policy among them."""

    answered: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    policy_version: int = 0
    policy_model: str = ""
    lora_adapter: str = ""
    routes: dict[str, pb.PolicyRoute] = field(default_factory=dict)
    """Each run's route at the highest version any peer reports, by model name."""


class FleetJoin:
    def __init__(
        self, peers: AddressSet, control: IngestControl, poll_s: float = 0.25, timeout_s: float = 2.0
    ) -> None:  # fmt: skip
        self.peers = peers
        self.control = control
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self._clients: dict[str, AsyncIngestClient] = {}
        self._watch: asyncio.Task[None] | None = None

    async def join(self) -> None:
        """Adopt the peers' policy, and hold traffic while any of them is paused."""
        if not self.peers:
            return
        view = await self.survey()
        self._adopt(view)
        log.info("joined_peers", answered=view.answered, unreachable=view.unreachable, paused=view.paused,
                 policy_version=self.control.policy.version)  # fmt: skip
        if view.paused:
            self.control.gate.hold(JOIN_HOLD)
            self._watch = asyncio.create_task(self._wait_for_resume(), name="ingest-fleet-join")

    async def survey(self) -> PeerView:
        """Every peer's stats now, this ingest itself left out."""
        view = PeerView()
        try:
            addresses = await asyncio.to_thread(self.peers.addresses)
        except UnresolvedAddress as error:
            log.warning("peers_unresolved", error=str(error))
            return view
        own_start = int(self.control.start_time * 1e9)
        replies = await asyncio.gather(*(self._stats(address) for address in addresses))
        for address, stats in zip(addresses, replies, strict=True):
            if stats is None:
                view.unreachable.append(address)
                continue
            if stats.start_time.ToNanoseconds() == own_start:
                continue
            view.answered.append(address)
            if stats.paused and not stats.joining:
                view.paused.append(address)
            if stats.policy_version > view.policy_version:
                view.policy_version, view.policy_model, view.lora_adapter = (
                    stats.policy_version, stats.policy_model, stats.lora_adapter)  # fmt: skip
            for route in stats.routes:
                known = view.routes.get(route.policy_model)
                if known is None or route.policy_version > known.policy_version:
                    view.routes[route.policy_model] = route
        return view

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    async def _wait_for_resume(self) -> None:
        gate = self.control.gate
        while gate.held_for(JOIN_HOLD):
            await asyncio.sleep(self.poll_s)
            view = await self.survey()
            if not gate.held_for(JOIN_HOLD):
                break  # the trainer resumed this ingest meanwhile: its word is the newer one
            self._adopt(view)
            if not view.paused:
                # No peer answering at all means no sync to wait for that anyone could still end.
                gate.release(JOIN_HOLD)
                log.info(
                    "peers_resumed",
                    answered=view.answered,
                    policy_version=self.control.policy.version,
                )

    def _adopt(self, view: PeerView) -> None:
        if self.control.adopt(view.policy_version, view.policy_model, view.lora_adapter):
            log.info(
                "policy_adopted_from_peers",
                policy_version=view.policy_version,
                lora_adapter=view.lora_adapter,
            )
        for route in view.routes.values():
            if self.control.adopt_route(
                route.policy_version, route.policy_model, route.lora_adapter
            ):
                log.info("route_adopted_from_peers", policy_model=route.policy_model,
                         policy_version=route.policy_version, lora_adapter=route.lora_adapter)  # fmt: skip

    async def _stats(self, address: str) -> pb.GetStatsResponse | None:
        client = self._clients.get(address)
        if client is None:
            # Not retried: a peer that does not answer now is left out of this survey, and the next one asks again.
            client = self._clients[address] = AsyncIngestClient(
                address, timeout_s=self.timeout_s, retries=0
            )
        try:
            return await client.get_stats(pb.GetStatsRequest())
        except RPCError as error:
            # A peer that refuses this ingest's token is a misconfiguration to see, not a peer that is down.
            report = log.debug if error.code in GONE else log.warning
            report("peer_unanswered", address=address, code=error.code.name, details=error.message)
            return None

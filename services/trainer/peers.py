"""Where the trainer's peers are (the assembler, the vLLM replicas, the ingests), and the ingests
among them that it pauses, versions and resumes around each weight sync.

The ingests' entries are addresses or `dns:///NAME:PORT` names (services/runtime/addresses.py),
resolved at every sync, so ingests scaled up or down are in the next sync without
restarting the trainer. A name that does not resolve fails the sync, naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from parity.api.ingest.v1 import ingest_service_pb2 as ingest_pb
from parity.clients import IngestClient, RPCError
from parity.services.runtime.addresses import AddressSet, Resolve, UnresolvedAddress, resolve_all
from parity.services.runtime.errors import Unavailable


@dataclass(frozen=True)
class TrainerDeployment:
    """Where the trainer's peers are; fixed for the life of the service."""

    assembler_address: str
    replica_urls: tuple[str, ...]
    work_dir: Path
    """Weights pushed to replicas are written under work_dir/weights."""
    ingest_addresses: tuple[str, ...] = ()
    """Every ingest replica: all are paused, versioned and resumed together around each sync."""
    serving_replica_urls: tuple[str, ...] = ()
    """The replicas users are served by; only a gated promotion changes them. Empty: runs update the only replicas there are."""
    serving_ingest_addresses: tuple[str, ...] = ()
    """The ingests in front of the serving replicas, paused and versioned around a promotion."""
    consumer_id: str = "trainer"
    sync_tolerance: float = 0.0
    """Largest probe difference a verified replica may show; 0 derives it from the dtypes on both sides."""
    max_message_bytes: int = 64 << 20
    replica_api_key: str = field(default="", repr=False)
    """vLLM's VLLM_API_KEY, sent to every replica."""
    max_concurrent_runs: int = 1
    """LoRA runs on one base model trained at once; 1: one run at a time."""


class IngestFleet(AddressSet):
    def __init__(self, entries: Sequence[str], resolve: Resolve = resolve_all) -> None:
        super().__init__(entries, resolve)
        self._clients: dict[str, IngestClient] = {}

    def members(self) -> list[IngestClient]:
        """A client for every ingest now (one per address, kept across syncs)."""
        # Pausing ingests needs an admin token: this process's own (PARITY_TOKEN), as every client sends it.
        return [
            self._clients.setdefault(address, IngestClient(address)) for address in self.addresses()
        ]

    def highest_policy_version(self) -> int:
        """The highest version any ingest stamps, on any route: a run resumes past every one of them."""
        versions = [0]
        try:
            members = self.members()
        except UnresolvedAddress as error:
            raise Unavailable(f"ingest {error}") from None
        for ingest in members:
            try:
                stats = ingest.get_stats(ingest_pb.GetStatsRequest())
            except RPCError as error:
                raise Unavailable(f"ingest at {ingest.address}: {error}") from None
            # Runs' routes too: a run resumed from an earlier checkpoint goes on past its route's version.
            versions += [
                int(stats.policy_version),
                *(int(route.policy_version) for route in stats.routes),
            ]
        return max(versions)

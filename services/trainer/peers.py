"""The ingest replicas the trainer pauses, versions and resumes around each weight sync,
and the policy version they stamp, which a run starts past.

Entries are addresses or `dns:///NAME:PORT` names (services/runtime/addresses.py),
resolved at every sync, so ingests scaled up or down are in the next sync without
restarting the trainer. A name that does not resolve fails the sync, naming it.
"""

from __future__ import annotations

from collections.abc import Sequence

from parity.api.ingest.v1 import ingest_service_pb2 as ingest_pb
from parity.clients import IngestClient, RPCError
from parity.services.runtime.addresses import AddressSet, Resolve, UnresolvedAddress, resolve_all
from parity.services.runtime.errors import Unavailable


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
        """The highest version any ingest stamps: a run resumes past every one of them."""
        versions = [0]
        try:
            members = self.members()
        except UnresolvedAddress as error:
            raise Unavailable(f"ingest {error}") from None
        for ingest in members:
            try:
                versions.append(int(ingest.get_stats(ingest_pb.GetStatsRequest()).policy_version))
            except RPCError as error:
                raise Unavailable(f"ingest at {ingest.address}: {error}") from None
        return max(versions)

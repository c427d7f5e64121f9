"""The ingest replicas the trainer pauses, versions and resumes around each weight sync.

Entries are addresses or `dns:///NAME:PORT` names (services/runtime/addresses.py),
resolved at every sync, so ingests scaled up or down are in the next sync without
restarting the trainer. A name that does not resolve fails the sync, naming it.
"""

from __future__ import annotations

from collections.abc import Sequence

from parity.clients import IngestClient
from parity.services.runtime.addresses import AddressSet, Resolve, resolve_all


class IngestFleet(AddressSet):
    def __init__(self, entries: Sequence[str], resolve: Resolve = resolve_all) -> None:
        super().__init__(entries, resolve)
        self._clients: dict[str, IngestClient] = {}

    def members(self) -> list[IngestClient]:
        """A client for every ingest now (one per address, kept across syncs)."""
        # Pausing ingests needs an admin token: this process's own (PARITY_TOKEN), as every client sends it.
        return [self._clients.setdefault(address, IngestClient(address)) for address in self.addresses()]

"""The ingest replicas the trainer pauses, versions and resumes around each weight sync.

Each entry is an address (`HOST:PORT`) or a name to resolve at every use,
`dns:///NAME:PORT`, gRPC's own syntax: every address the name holds is one ingest. A
Kubernetes headless Service is such a name, so ingests scaled up or down are in the next
sync without restarting the trainer. A name that does not resolve fails the sync,
naming it.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence

from parity.clients import IngestClient

DNS_SCHEME = "dns:///"

Resolve = Callable[[str, int], list[str]]


class UnresolvedIngest(Exception):
    """A `dns:///` name with no address."""


def resolve_all(host: str, port: int) -> list[str]:
    """Every IPv4 and IPv6 address `host` holds, as gRPC addresses with `port`."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise UnresolvedIngest(f"{host} does not resolve: {error.strerror}") from None
    addresses = dict.fromkeys(f"[{info[4][0]}]:{port}" if info[0] == socket.AF_INET6 else f"{info[4][0]}:{port}"
                              for info in found)  # fmt: skip
    return sorted(addresses)


class IngestFleet:
    def __init__(self, entries: Sequence[str], resolve: Resolve = resolve_all) -> None:
        for entry in entries:
            if entry.startswith(DNS_SCHEME):
                _split(entry)
        self.entries = tuple(entries)
        self.resolve = resolve
        self._clients: dict[str, IngestClient] = {}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def addresses(self) -> list[str]:
        """Every ingest's address now; raises UnresolvedIngest naming a name that holds none."""
        found: dict[str, None] = {}
        for entry in self.entries:
            if entry.startswith(DNS_SCHEME):
                host, port = _split(entry)
                resolved = self.resolve(host, port)
                if not resolved:
                    raise UnresolvedIngest(f"{entry} resolves to no address")
                found.update(dict.fromkeys(resolved))
            else:
                found[entry] = None
        return list(found)

    def members(self) -> list[IngestClient]:
        """A client for every ingest now (one per address, kept across syncs)."""
        # Pausing ingests needs an admin token: this process's own (PARITY_TOKEN), as every client sends it.
        return [self._clients.setdefault(address, IngestClient(address)) for address in self.addresses()]


def _split(entry: str) -> tuple[str, int]:
    target = entry.removeprefix(DNS_SCHEME)
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{entry!r}: a dns:/// ingest address needs a name and a port, dns:///NAME:PORT")
    return host.strip("[]"), int(port)

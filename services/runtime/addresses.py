"""A set of gRPC peers named by fixed addresses and DNS names, resolved at each use.

Each entry is an address (`HOST:PORT`) or a name to resolve at every use,
`dns:///NAME:PORT`, gRPC's own syntax: every address the name holds is one peer. A
Kubernetes headless Service is such a name, so replicas scaled up or down are seen at
the next use without restarting anything. A name that holds no address is an error
naming it.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence

DNS_SCHEME = "dns:///"

Resolve = Callable[[str, int], list[str]]


class UnresolvedAddress(Exception):
    """A `dns:///` name with no address."""


def resolve_all(host: str, port: int) -> list[str]:
    """Every IPv4 and IPv6 address `host` holds, as gRPC addresses with `port`."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise UnresolvedAddress(f"{host} does not resolve: {error.strerror}") from None
    addresses = dict.fromkeys(f"[{info[4][0]}]:{port}" if info[0] == socket.AF_INET6 else f"{info[4][0]}:{port}"
                              for info in found)  # fmt: skip
    return sorted(addresses)


class AddressSet:
    def __init__(self, entries: Sequence[str], resolve: Resolve = resolve_all) -> None:
        for entry in entries:
            if entry.startswith(DNS_SCHEME):
                _split(entry)
        self.entries = tuple(entries)
        self.resolve = resolve

    def __bool__(self) -> bool:
        return bool(self.entries)

    def addresses(self) -> list[str]:
        """Every address now, in entry order; raises UnresolvedAddress naming a name that holds none."""
        found: dict[str, None] = {}
        for entry in self.entries:
            if entry.startswith(DNS_SCHEME):
                host, port = _split(entry)
                resolved = self.resolve(host, port)
                if not resolved:
                    raise UnresolvedAddress(f"{entry} resolves to no address")
                found.update(dict.fromkeys(resolved))
            else:
                found[entry] = None
        return list(found)


def parse_address_list(text: str) -> list[str]:
    """A comma-separated list of addresses and dns:/// names, as flags take them."""
    return [entry.strip() for entry in text.split(",") if entry.strip()]


def _split(entry: str) -> tuple[str, int]:
    target = entry.removeprefix(DNS_SCHEME)
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{entry!r}: a dns:/// address needs a name and a port, dns:///NAME:PORT")
    return host.strip("[]"), int(port)

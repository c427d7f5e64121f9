"""The trainer's ingests: fixed addresses and dns:/// names resolved at each use."""

from __future__ import annotations

import pytest

from parity.services.runtime.addresses import UnresolvedAddress
from parity.services.trainer.peers import IngestFleet


def test_a_name_is_every_address_it_resolves_to_now_beside_fixed_addresses() -> None:
    answers = {
        "ingest.parity.svc": [
            ["10.0.0.5:50052", "10.0.0.6:50052"],
            ["10.0.0.6:50052", "10.0.0.7:50052"],
        ]
    }

    def resolve(host: str, port: int) -> list[str]:
        assert port == 50052
        return answers[host].pop(0)

    fleet = IngestFleet(["dns:///ingest.parity.svc:50052", "10.0.0.5:50052", "edge:50052"], resolve)
    assert fleet.addresses() == ["10.0.0.5:50052", "10.0.0.6:50052", "edge:50052"]
    # Scaled between syncs: the next use sees the new set.
    assert [c.address for c in fleet.members()] == [
        "10.0.0.6:50052",
        "10.0.0.7:50052",
        "10.0.0.5:50052",
        "edge:50052",
    ]


def test_a_name_that_resolves_to_nothing_is_named() -> None:
    fleet = IngestFleet(["dns:///gone.parity.svc:50052"], lambda host, port: [])
    with pytest.raises(UnresolvedAddress, match="gone.parity.svc"):
        fleet.addresses()
    with pytest.raises(UnresolvedAddress, match="does not resolve"):
        IngestFleet(["dns:///no-such-host.invalid:50052"]).addresses()


@pytest.mark.parametrize("entry", ["dns:///ingest", "dns:///:50052", "dns:///ingest:port"])
def test_a_malformed_name_is_refused_up_front(entry: str) -> None:
    with pytest.raises(ValueError, match="dns:///NAME:PORT"):
        IngestFleet([entry])


def test_no_entries_is_no_fleet() -> None:
    assert not IngestFleet(())

"""IngestControl's per-run routes: set, refused, paused and resumed alone, listed, and kept across a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from parity.api.ingest.v1 import ingest_service_pb2 as pb
from parity.services.ingest.capture.policy_record import PolicyRecord, RecordedRoute
from parity.services.ingest.chat_backend import PolicyState
from parity.services.ingest.control import IngestControl, RouteStats
from parity.services.ingest.fleet_join import FleetJoin
from parity.services.ingest.traffic_gate import TrafficGate
from parity.services.ingest.upstream.policy_routes import PolicyRoute
from parity.services.ingest.upstream.replica_router import ReplicaRouter
from parity.services.runtime.errors import InvalidArgument


def control_over(path: Path) -> IngestControl:
    sink = SimpleNamespace(queue_depth=0, spool=SimpleNamespace(count=0), captured=0)
    return IngestControl(TrafficGate(), ReplicaRouter([]), sink, PolicyState(), PolicyRecord(path))  # type: ignore[arg-type]


def test_a_route_leaves_the_ingests_own_version_and_adapter_and_other_routes_alone(
    tmp_path: Path,
) -> None:
    control = control_over(tmp_path / "spool.db")
    control.set_policy_version(4, "base", "base-lora")
    assert control.set_policy_version(2, "run-a", "run-a", route=True) == 0
    assert control.set_policy_version(9, "run-b", "run-b-v9", route=True) == 0
    assert control.set_policy_version(3, "run-a", "run-a", route=True) == 2
    assert control.policy.version == 4
    assert (control.policy.adapter.model, control.policy.adapter.adapter) == ("base", "base-lora")
    assert control.policy.routes.get("run-b") == PolicyRoute("run-b", "run-b-v9", 9)
    # The ingest's own version may move below a route's: each has its own.
    assert control.set_policy_version(5, "base", "base-lora") == 4
    assert control.policy.routes.get("run-a") == PolicyRoute("run-a", "run-a", 3)


@pytest.mark.parametrize(
    ("model", "adapter", "version", "message"),
    [("", "run-a", 3, "policy_model is required"), ("run-a", "run-a", 1, "lower than route 'run-a'"),
     ("run-a", "", 1, "lower than route 'run-a'")],
)  # fmt: skip
def test_a_route_is_refused_without_its_model_or_below_its_version(
    tmp_path: Path, model: str, adapter: str, version: int, message: str
) -> None:
    control = control_over(tmp_path / "spool.db")
    control.set_policy_version(2, "run-a", "run-a", route=True)
    with pytest.raises(InvalidArgument, match=message):
        control.set_policy_version(version, model, adapter, route=True)
    assert control.policy.routes.get("run-a") == PolicyRoute("run-a", "run-a", 2)
    assert control.record.load_routes() == [RecordedRoute("run-a", "run-a", 2)]


async def test_stats_list_the_routes_and_which_are_paused(tmp_path: Path) -> None:
    control = control_over(tmp_path / "spool.db")
    control.set_policy_version(2, "run-b", "run-b", route=True)
    control.set_policy_version(7, "run-a", "run-a-lora", route=True)
    drained, paused_at = await control.pause(1.0, "run-a")
    assert drained == 0 and paused_at > 0
    stats = control.stats()
    assert not stats.paused and stats.policy_version == 0
    assert stats.routes == (
        RouteStats("run-a", "run-a-lora", 7, True),
        RouteStats("run-b", "run-b", 2, False),
    )
    assert control.resume("run-a") > 0 and not any(r.paused for r in control.stats().routes)


async def test_resume_with_no_model_lifts_every_hold(tmp_path: Path) -> None:
    control = control_over(tmp_path / "spool.db")
    control.set_policy_version(1, "run-a", "run-a", route=True)
    await control.pause(1.0, "run-a")
    await control.pause(1.0)
    await asyncio.sleep(0.01)
    # Lifting the route alone leaves the pause of all traffic standing.
    assert control.resume("run-a") > 0 and control.stats().paused
    await control.pause(1.0, "run-a")
    assert control.resume() > 0
    stats = control.stats()
    assert not stats.paused and not stats.routes[0].paused


async def test_a_routes_pause_needs_a_positive_drain_timeout(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="drain_timeout"):
        await control_over(tmp_path / "spool.db").pause(0.0, "run-a")


def test_routes_survive_a_restart_and_a_newer_one_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "spool.db"
    control = control_over(path)
    control.set_policy_version(3, "base", "")
    control.set_policy_version(5, "run-a", "run-a", route=True)
    control.set_policy_version(6, "run-a", "run-a-v6", route=True)
    control.set_policy_version(2, "run-b", "run-b", route=True)
    control.record.close()

    restarted = control_over(path)
    assert restarted.record.load_routes() == [
        RecordedRoute("run-a", "run-a-v6", 6), RecordedRoute("run-b", "run-b", 2)
    ]  # fmt: skip
    for route in restarted.record.load_routes():
        assert restarted.adopt_route(route.version, route.model, route.adapter)
    assert restarted.policy.routes.get("run-a") == PolicyRoute("run-a", "run-a-v6", 6)
    # A peer's route at an older or equal version is not taken; a newer one is.
    assert not restarted.adopt_route(6, "run-a", "run-a-old")
    assert restarted.adopt_route(8, "run-b", "run-b-v8")
    assert restarted.policy.routes.get("run-b") == PolicyRoute("run-b", "run-b-v8", 8)
    restarted.record.close()


async def test_a_joining_ingest_takes_on_each_routes_newest_version_among_its_peers(
    tmp_path: Path,
) -> None:
    control = control_over(tmp_path / "spool.db")
    control.set_policy_version(9, "run-c", "run-c", route=True)
    replies = {
        "p1": pb.GetStatsResponse(routes=[pb.PolicyRoute(policy_model="run-a", lora_adapter="run-a-v3", policy_version=3),
                                          pb.PolicyRoute(policy_model="run-c", lora_adapter="run-c-old", policy_version=4)]),
        "p2": pb.GetStatsResponse(routes=[pb.PolicyRoute(policy_model="run-a", lora_adapter="run-a-v5", policy_version=5)]),
    }  # fmt: skip
    fleet = FleetJoin(SimpleNamespace(addresses=lambda: list(replies)), control)  # type: ignore[arg-type]

    async def stats(address: str) -> pb.GetStatsResponse:
        return replies[address]

    fleet._stats = stats  # type: ignore[method-assign]
    await fleet.join()
    assert control.policy.routes.get("run-a") == PolicyRoute("run-a", "run-a-v5", 5)
    assert control.policy.routes.get("run-c") == PolicyRoute("run-c", "run-c", 9)
    assert not control.gate.paused
    await fleet.close()


def test_a_withdrawn_route_is_recorded_so_a_restart_does_not_serve_its_adapter_again(
    tmp_path: Path,
) -> None:
    control = control_over(tmp_path / "spool.db")
    control.set_policy_version(2, "tenant-a", "tenant-a", route=True)
    assert control.set_policy_version(3, "tenant-a", "", route=True) == 2
    assert control.record.load_routes() == [RecordedRoute("tenant-a", "", 3)]
    assert not control.adopt_route(2, "tenant-a", "tenant-a")
    assert "tenant-a" not in control.policy.routes

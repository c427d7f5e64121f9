"""Per-run routes: a model name's requests go to its run's adapter at its run's version."""

from __future__ import annotations

import pytest

from parity.services.ingest.upstream.policy_routes import PolicyRoute, PolicyRoutes
from parity.services.runtime.errors import InvalidArgument


def test_requests_for_a_routes_model_go_to_its_adapter_and_others_are_left_alone() -> None:
    routes = PolicyRoutes()
    assert not routes and routes.set("run-a", "run-a-lora", 3) == 0
    routes.set("run-b", "run-b", 7)  # an adapter served under the very name its agents ask for
    body = {"model": "run-a"}
    assert (
        routes.route(body) == PolicyRoute("run-a", "run-a-lora", 3)
        and body["model"] == "run-a-lora"
    )
    other = {"model": "base"}
    assert routes.route(other) is None and other == {"model": "base"}
    assert [r.model for r in routes.all()] == ["run-a", "run-b"] and "run-b" in routes


def test_a_route_needs_its_model() -> None:
    with pytest.raises(InvalidArgument, match="policy_model"):
        PolicyRoutes().set("", "lora", 1)


def test_a_withdrawn_route_serves_nothing_and_keeps_its_version() -> None:
    """A tenant's promotion taken back: its agents' requests go where they would without the route, and an
    older route (a peer's, the spool's) cannot bring the adapter back."""
    routes = PolicyRoutes()
    routes.set("tenant-a", "tenant-a", 4)
    routes.set("tenant-b", "tenant-b", 2)
    assert routes.set("tenant-a", "", 5) == 4
    body = {"model": "tenant-a"}
    assert routes.route(body) is None and body == {"model": "tenant-a"}
    assert "tenant-a" not in routes and routes.served() == ["tenant-b"]
    assert routes.get("tenant-a") == PolicyRoute("tenant-a", "", 5)
    with pytest.raises(InvalidArgument, match="lower than route 'tenant-a'"):
        routes.set("tenant-a", "tenant-a", 4)
    routes.set("tenant-a", "tenant-a", 6)
    assert "tenant-a" in routes and routes.served() == ["tenant-a", "tenant-b"]


def test_a_routes_version_never_goes_back_and_other_routes_keep_theirs() -> None:
    routes = PolicyRoutes()
    routes.set("run-a", "run-a", 5)
    routes.set("run-b", "run-b", 1)
    with pytest.raises(InvalidArgument, match="lower than route 'run-a'"):
        routes.set("run-a", "run-a", 4)
    assert routes.set("run-a", "run-a-v2", 5) == 5 and routes.set("run-a", "run-a-v3", 6) == 5
    assert routes.get("run-a") == PolicyRoute("run-a", "run-a-v3", 6)
    assert routes.get("run-b") == PolicyRoute("run-b", "run-b", 1)

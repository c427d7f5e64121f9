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


@pytest.mark.parametrize(
    ("model", "adapter", "field"), [("", "lora", "policy_model"), ("run-a", "", "lora_adapter")]
)
def test_a_route_needs_its_model_and_its_adapter(model: str, adapter: str, field: str) -> None:
    with pytest.raises(InvalidArgument, match=field):
        PolicyRoutes().set(model, adapter, 1)


def test_a_routes_version_never_goes_back_and_other_routes_keep_theirs() -> None:
    routes = PolicyRoutes()
    routes.set("run-a", "run-a", 5)
    routes.set("run-b", "run-b", 1)
    with pytest.raises(InvalidArgument, match="lower than route 'run-a'"):
        routes.set("run-a", "run-a", 4)
    assert routes.set("run-a", "run-a-v2", 5) == 5 and routes.set("run-a", "run-a-v3", 6) == 5
    assert routes.get("run-a") == PolicyRoute("run-a", "run-a-v3", 6)
    assert routes.get("run-b") == PolicyRoute("run-b", "run-b", 1)

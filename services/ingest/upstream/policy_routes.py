"""Per-run routes: several LoRA runs trained at once on the replicas' one base model.

Each run's agents ask for the run's own model name. A route (SetPolicyVersion with
`route`) sends requests for that name to the run's adapter and stamps their calls
with the run's own policy version; the ingest's own version and adapter
(PolicyAdapter), and the other runs' routes, stay as they are. A route's adapter may
carry the very name its agents ask for: vLLM serves the adapter under it.

A route set without an adapter is withdrawn: its agents are served as if it had
never been set (through the model aliases, to the base model, when they name one),
and the route keeps only its version, so an older route from a peer or the spool
cannot bring the adapter back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parity.services.runtime.errors import InvalidArgument


@dataclass(frozen=True)
class PolicyRoute:
    model: str
    """The model name the run's agents ask for."""
    adapter: str
    """The LoRA adapter, loaded in the replicas, that their requests go to; empty: the route is withdrawn."""
    version: int
    """The policy version their calls record."""


class PolicyRoutes:
    def __init__(self) -> None:
        self._routes: dict[str, PolicyRoute] = {}

    def __bool__(self) -> bool:
        return bool(self._routes)

    def __contains__(self, model: str) -> bool:
        """Whether requests for `model` go to a route's adapter."""
        route = self._routes.get(model)
        return route is not None and bool(route.adapter)

    def get(self, model: str) -> PolicyRoute | None:
        return self._routes.get(model)

    def all(self) -> list[PolicyRoute]:
        """Every route, withdrawn ones included, by model name."""
        return [self._routes[model] for model in sorted(self._routes)]

    def served(self) -> list[str]:
        """The model names whose requests go to an adapter."""
        return [route.model for route in self.all() if route.adapter]

    def set(self, model: str, adapter: str, version: int) -> int:
        """Point `model` at `adapter` at `version`; returns the route's previous version (0 for a new route)."""
        if not model:
            raise InvalidArgument(
                "policy_model is required with route: the model name the run's agents ask for"
            )
        current = self._routes.get(model)
        previous = current.version if current is not None else 0
        if version < previous:
            raise InvalidArgument(
                f"policy_version {version} is lower than route {model!r}'s current {previous}"
            )
        self._routes[model] = PolicyRoute(model, adapter, version)
        return previous

    def route(self, body: dict[str, Any]) -> PolicyRoute | None:
        """Point an upstream request for a route's model at the route's adapter; returns the route, or None."""
        route = self._routes.get(body.get("model", ""))
        if route is None or not route.adapter:
            return None
        body["model"] = route.adapter
        return route

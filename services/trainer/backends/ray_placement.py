"""Where a run's Ray ranks go: `ray_workers_per_node` ranks on each of `ray_nodes` nodes.

verl's `RayResourcePool` asks for one STRICT_PACK placement group per node. That keeps
each group on one node, but lets two groups share a node with room for both, so on a
cluster whose first node could hold every rank, "two nodes" would all run on one.
`NodeSpreadPool` pins each group to a node of its own (Ray's `ray.io/node-id` label), the
trainer's own node first when it has room, so rank 0, which writes the weights vLLM
loads, runs beside the trainer. A cluster with fewer nodes with room than the run asks
for is refused at once, naming what it has, where Ray would wait forever.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from verl.single_controller.ray import RayResourcePool

from parity.services.runtime.errors import FailedPrecondition

log = structlog.get_logger(__name__)

# How long the placement groups may take to be ready once nodes with room were found.
PLACEMENT_TIMEOUT_S = 300.0


def nodes_with_room(nodes: Sequence[Mapping[str, Any]], bundle: Mapping[str, float], count: int,
                    first: str | None = None) -> list[str]:  # fmt: skip
    """Ids of the live nodes (`ray.nodes()` entries) whose resources hold `count` bundles; `first` leads
    when it is one of them, the rest by address and id, so the ranks' order is stable."""
    fitting = [
        node for node in nodes
        if node.get("Alive") and all(node.get("Resources", {}).get(name, 0) >= amount * count
                                     for name, amount in bundle.items())
    ]  # fmt: skip
    fitting.sort(
        key=lambda node: (
            node["NodeID"] != first,
            node.get("NodeManagerAddress", ""),
            node["NodeID"],
        )
    )
    return [node["NodeID"] for node in fitting]


class NodeSpreadPool(RayResourcePool):
    """verl's resource pool with each node's placement group on a node of its own."""

    def __init__(self, nodes: int, per_node: int, use_gpu: bool, max_colocate_count: int) -> None:
        super().__init__(
            process_on_nodes=[per_node] * nodes,
            use_gpu=use_gpu,
            max_colocate_count=max_colocate_count,
        )
        self.nodes, self.per_node = nodes, per_node

    def get_placement_groups(self, strategy: str = "STRICT_PACK", name: str | None = None,
                             device_name: str = "cuda") -> list[Any]:  # fmt: skip
        if self.pgs is None:
            placed = self._place()
            # verl sets pgs to None with no annotation, so mypy takes None for its only type.
            self.pgs = placed  # type: ignore[assignment]
            return placed
        return self.pgs

    def _bundle(self) -> dict[str, float]:
        from verl.utils.device import get_platform

        bundle: dict[str, float] = {"CPU": self.max_colocate_count}
        if self.use_gpu:
            bundle[get_platform().ray_resource_name()] = 1
        return bundle

    def _place(self) -> list[Any]:
        import ray
        from ray.util.placement_group import NODE_ID_LABEL_KEY, placement_group

        bundle = self._bundle()
        cluster = ray.nodes()
        chosen = nodes_with_room(
            cluster, bundle, self.per_node, first=ray.get_runtime_context().get_node_id()
        )
        if len(chosen) < self.nodes:
            alive = sum(1 for node in cluster if node.get("Alive"))
            raise FailedPrecondition(
                f"ray_nodes is {self.nodes}, with ray_workers_per_node {self.per_node} on each (a rank needs "
                f"{bundle}), but the Ray cluster has {alive} live node(s), {len(chosen)} of them with room; start "
                "Ray on more nodes (`ray start --address HEAD:PORT`) or ask for fewer"
            )
        groups = [
            placement_group([dict(bundle) for _ in range(self.per_node)], strategy="STRICT_PACK",
                            bundle_label_selector=[{NODE_ID_LABEL_KEY: node}] * self.per_node)
            for node in chosen[: self.nodes]
        ]  # fmt: skip
        ready, _ = ray.wait(
            [group.ready() for group in groups],
            num_returns=len(groups),
            timeout=PLACEMENT_TIMEOUT_S,
        )
        if len(ready) < len(groups):
            raise FailedPrecondition(
                f"the Ray cluster did not place {self.nodes} x {self.per_node} ranks within {PLACEMENT_TIMEOUT_S:g} s "
                "(other work holds its resources?)"
            )
        log.info("ray_ranks_placed", nodes=chosen[: self.nodes], ranks_per_node=self.per_node)
        return groups


def rank_nodes(worker_group: Any) -> list[str]:
    """The Ray node each rank of a verl worker group runs on, in rank order."""
    import ray

    return ray.get([worker.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
                    for worker in worker_group.workers])  # fmt: skip

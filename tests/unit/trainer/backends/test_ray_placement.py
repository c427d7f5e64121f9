"""Which Ray nodes a run's ranks go to: nodes with room for a node's share, the trainer's own first."""

from __future__ import annotations

import pytest

from parity.services.trainer.backends.ray_placement import nodes_with_room
from parity.training.settings import SettingsError, TrainSettings


def node(
    node_id: str, cpus: float, alive: bool = True, gpus: float = 0, address: str = "10.0.0.1"
) -> dict:
    resources = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    return {
        "NodeID": node_id,
        "Alive": alive,
        "Resources": resources,
        "NodeManagerAddress": address,
    }


def test_only_live_nodes_with_room_for_every_rank_qualify_the_trainers_first() -> None:
    cluster = [node("c", 4, address="10.0.0.3"), node("a", 4, address="10.0.0.2"), node("small", 1),
               node("dead", 8, alive=False), node("b", 2, address="10.0.0.2")]  # fmt: skip
    assert nodes_with_room(cluster, {"CPU": 1}, 2) == ["a", "b", "c"]
    assert nodes_with_room(cluster, {"CPU": 2}, 2) == ["a", "c"]
    assert nodes_with_room(cluster, {"CPU": 1}, 2, first="c") == ["c", "a", "b"]
    gpus = [node("g1", 8, gpus=8), node("g2", 8, gpus=2), node("cpu", 64)]
    assert nodes_with_room(gpus, {"CPU": 1, "GPU": 1}, 4) == ["g1"]


def test_ray_nodes_needs_ranks_to_spread_and_a_backend_that_places_them() -> None:
    assert TrainSettings(ray_workers_per_node=2, ray_nodes=2).ray_nodes == 2
    with pytest.raises(
        SettingsError, match="ray_nodes: spreads Ray ranks over nodes; set ray_workers_per_node"
    ):
        TrainSettings(ray_nodes=2)
    with pytest.raises(SettingsError, match="ray_nodes: must be at least 1, got 0"):
        TrainSettings(ray_nodes=0)
    with pytest.raises(SettingsError, match="ray_workers_per_node: places fsdp ranks"):
        TrainSettings(ray_workers_per_node=1, backend="cpu")

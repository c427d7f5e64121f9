"""Finding vLLM's engine core below its API server and moving it onto the worker's cores."""

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from parity.services.inference.engine_core_placement import (
    descendants,
    engine_core_pids,
    parse_cpu_list,
    place_process,
)
from parity.services.inference.vllm_launcher import VllmLaunchConfig, VllmServer


@pytest.mark.parametrize(
    ("spec", "cores"),
    [
        ("0", {0}),
        ("0,2", {0, 2}),
        ("0-3", {0, 1, 2, 3}),
        ("0-1|4-5", {0, 1, 4, 5}),
        (" 1 , 3 ", {1, 3}),
    ],
)
def test_cpu_lists_as_vllm_takes_them(spec: str, cores: set[int]) -> None:
    assert parse_cpu_list(spec) == cores


@pytest.mark.parametrize("spec", ["auto", "all", "", "0-", "a,b"])
def test_symbolic_or_broken_values_name_no_cores(spec: str) -> None:
    assert parse_cpu_list(spec) is None


@pytest.fixture
def server_like_tree() -> Iterator[subprocess.Popen[bytes]]:
    """A parent that starts an engine core (titled as vLLM titles it) and another child,
    like vLLM's API server starts its engine core and a resource tracker."""
    script = "exec -a VLLM::EngineCore sleep 60 & sleep 60 & wait"
    parent = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    try:
        yield parent
    finally:
        os.killpg(parent.pid, 9)
        parent.wait()


def _wait_for_children(pid: int, count: int) -> list[int]:
    """The children once `count` are there and the engine core among them has its title: a forked child is
    there before it has exec'd (titled itself)."""
    for _ in range(500):
        if len(found := descendants(pid)) >= count and engine_core_pids(pid):
            return found
        time.sleep(0.01)
    raise AssertionError(f"{pid} has {descendants(pid)} below it, not {count} with an engine core")


def test_finds_only_the_engine_core_below_the_server(
    server_like_tree: subprocess.Popen[bytes],
) -> None:
    children = _wait_for_children(server_like_tree.pid, 2)
    (engine_core,) = engine_core_pids(server_like_tree.pid)
    (other,) = set(children) - {engine_core}
    assert Path(f"/proc/{engine_core}/cmdline").read_bytes().startswith(b"VLLM::EngineCore\0")
    assert engine_core_pids(other) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="core affinity is Linux's")
def test_placement_moves_every_thread(server_like_tree: subprocess.Popen[bytes]) -> None:
    _wait_for_children(server_like_tree.pid, 2)
    (engine_core,) = engine_core_pids(server_like_tree.pid)
    one_core = frozenset({min(os.sched_getaffinity(0))})
    place_process(engine_core, one_core)
    for task in os.listdir(f"/proc/{engine_core}/task"):
        assert os.sched_getaffinity(int(task)) == one_core


def _launched(tree: subprocess.Popen[bytes], tmp_path: Path, worker_cpus: str) -> VllmServer:
    """A launcher whose vLLM is `tree`, as it is once vLLM answers."""
    config = VllmLaunchConfig(
        model_path=tmp_path, port=1, log_path=tmp_path / "vllm.log", worker_cpus=worker_cpus
    )
    server = VllmServer(config)
    server._process = tree
    _wait_for_children(tree.pid, 2)
    return server


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="core affinity is Linux's")
def test_the_launcher_places_the_engine_core_on_the_worker_cpus(
    server_like_tree: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    core = min(os.sched_getaffinity(0))
    _launched(server_like_tree, tmp_path, str(core))._place_engine_core()
    (engine_core,) = engine_core_pids(server_like_tree.pid)
    assert os.sched_getaffinity(engine_core) == {core}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="core affinity is Linux's")
def test_cores_this_host_lacks_leave_the_engine_core_where_it_was(
    server_like_tree: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    _launched(server_like_tree, tmp_path, "4000-4001")._place_engine_core()
    (engine_core,) = engine_core_pids(server_like_tree.pid)
    assert os.sched_getaffinity(engine_core) == os.sched_getaffinity(0)

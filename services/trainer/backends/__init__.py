"""Where an update runs: one module per backend, chosen by a short name (see `select_backend`).

Both compute a prefix that a step's rows share once: `prefix_tree` finds the clusters, `shared_prefix`
runs them in the cpu loop, `prefix_packing` packs them as trees for fsdp's engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parity.services.trainer.backends.base import TrainingBackend
from parity.services.trainer.run_settings import RunSettings

if TYPE_CHECKING:
    from parity.services.trainer.backends.shared_base import SharedBase


def backend_name(settings: RunSettings) -> str:
    """`cpu` or `fsdp`; `auto` is fsdp when torch sees a GPU or Ray workers are asked for, else the cpu loop."""
    import torch

    if settings.backend != "auto":
        return settings.backend
    return "fsdp" if torch.cuda.is_available() or settings.ray_workers_per_node else "cpu"


def select_backend(settings: RunSettings, base: SharedBase | None = None) -> TrainingBackend:
    """The run's backend; with `base`, a LoRA run's adapter on a base model other runs share (the cpu loop)."""
    name = backend_name(settings)
    if name == "cpu":
        from parity.services.trainer.backends.cpu import CpuBackend

        return CpuBackend(settings, base)
    from parity.services.trainer.backends.fsdp import FsdpBackend

    return FsdpBackend(settings)


__all__ = ["TrainingBackend", "backend_name", "select_backend"]

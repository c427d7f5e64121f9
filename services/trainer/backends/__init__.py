"""Where an update runs: one module per backend, chosen by a short name (see `select_backend`)."""

from __future__ import annotations

from parity.services.trainer.backends.base import TrainingBackend
from parity.services.trainer.run_settings import RunSettings


def select_backend(settings: RunSettings) -> TrainingBackend:
    """`cpu`, `fsdp`, or `auto`: fsdp when torch sees a GPU, else the cpu loop; fsdp runs on CPU too."""
    import torch

    name = settings.backend
    if name == "auto":
        name = "fsdp" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        from parity.services.trainer.backends.cpu import CpuBackend

        return CpuBackend(settings)
    from parity.services.trainer.backends.fsdp import FsdpBackend

    return FsdpBackend(settings)


__all__ = ["TrainingBackend", "select_backend"]

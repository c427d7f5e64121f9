"""The CPU path: a plain torch loop in this process, float32, for machines without GPUs and for CI.

verl's FSDP engine needs torch.distributed with NCCL and CUDA devices, so on CPU the
update is a single-process loop; it calls the same verl estimators and PPO-clip loss
as the GPU path (see `base.TorchPolicyBackend`).
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from parity.services.trainer.backends.base import TorchPolicyBackend
from parity.services.trainer.run_settings import RunSettings


class CpuBackend(TorchPolicyBackend):
    name = "cpu"
    device = torch.device("cpu")

    def __init__(self, settings: RunSettings) -> None:
        torch.manual_seed(settings.seed)
        # float32, as vLLM serves it here, so the sync probe compares like with like.
        model = AutoModelForCausalLM.from_pretrained(settings.model_path, dtype=torch.float32)
        reference = copy.deepcopy(model).eval().requires_grad_(False) if settings.kl_coef > 0 else None
        super().__init__(settings, model, reference)

    def save_weights(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(directory, safe_serialization=True)

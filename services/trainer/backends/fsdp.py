"""The GPU path: the policy sharded with FSDP2 (`fully_shard`, what verl's FSDP engine builds on),
trained with the same verl estimators, PPO-clip loss and TIS weights as the CPU path.

This backend runs the trainer process as rank 0 of a torch.distributed group on
the GPUs of one node: a single GPU needs nothing set up (the process makes a
one-rank NCCL group itself); `torchrun --nproc-per-node N -m parity.cli trainer
serve` gives every rank a shard, and rank 0 talks to the assembler and replicas.
Past one node, verl's Ray worker groups place the ranks (see docs/trainer.md);
this module is the single-node piece of that.

Weights pushed to vLLM are gathered to full tensors on CPU and written as float32
safetensors, like the CPU path, so the sync probe compares the same numbers.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import AutoModelForCausalLM

from parity.services.trainer.backends.base import OPTIMIZER_FILE, TorchPolicyBackend
from parity.services.trainer.run_settings import RunSettings

_FULL_ON_CPU = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _ensure_process_group() -> None:
    if dist.is_initialized():
        return
    # A lone trainer process is a one-rank group; torchrun sets these for each rank.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=int(os.environ.get("RANK", 0)), world_size=int(os.environ.get("WORLD_SIZE", 1)))


class FsdpBackend(TorchPolicyBackend):
    name = "fsdp"

    def __init__(self, settings: RunSettings) -> None:
        _ensure_process_group()
        self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(self.device)
        torch.manual_seed(settings.seed)
        model = AutoModelForCausalLM.from_pretrained(settings.model_path, dtype=torch.float32).to(self.device)
        # float32 parameters and compute keep the probe exact; bf16 halves memory where that matters more
        # (then raise --sync-tolerance to what bf16 rounding gives).
        precision = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=precision)
        fully_shard(model, mp_policy=precision)
        reference = None
        if settings.kl_coef > 0:
            reference = AutoModelForCausalLM.from_pretrained(settings.model_path, dtype=torch.float32).to(self.device)
            reference.eval().requires_grad_(False)
        super().__init__(settings, model, reference)

    def save_weights(self, directory: Path) -> None:
        state = get_model_state_dict(self.model, options=_FULL_ON_CPU)
        if dist.get_rank() == 0:
            directory.mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(directory, state_dict=state, safe_serialization=True)
        dist.barrier()

    def save_state(self, directory: Path) -> None:
        self.save_weights(directory)
        optimizer_state = get_optimizer_state_dict(self.model, self.optimizer, options=_FULL_ON_CPU)
        if dist.get_rank() == 0:
            torch.save(optimizer_state, directory / OPTIMIZER_FILE)
        dist.barrier()

    def load_state(self, directory: Path) -> None:
        from safetensors.torch import load_file

        state = {}
        for path in sorted(directory.glob("*.safetensors")):
            state.update(load_file(path))
        set_model_state_dict(self.model, state, options=StateDictOptions(full_state_dict=True, strict=False))
        optimizer_state = torch.load(directory / OPTIMIZER_FILE, weights_only=True)
        set_optimizer_state_dict(self.model, self.optimizer, optimizer_state, options=StateDictOptions(full_state_dict=True))

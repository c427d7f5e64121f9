"""verl's `TrainingWorker`, as each rank of the fsdp backend runs it, in this process or as a Ray actor.

Importing this module on a machine without a GPU installs Parity's CPU platform for
verl first: verl resolves its platform when its engine module is imported, and a Ray
actor is a fresh process that imports this module to unpickle its class. The one
addition to verl's worker is `save_hf_weights`, which gathers the sharded policy into
one Hugging Face checkpoint that vLLM's `reload_weights` reads, written by rank 0; in a
LoRA run, only the adapter, as the peft folder vLLM loads at run time.

Importing it also puts `engine_logprobs`' chunked log-probs in place of verl's per-token
loop, and on CUDA each training pass runs with TF32 matmuls (`compute_defaults`), while
forward-only passes (old and reference log-probs, the weight-sync probe) stay strict float32.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

if not torch.cuda.is_available():
    from parity.services.trainer.backends.verl_cpu_platform import install

    install()

import torch.distributed as dist  # noqa: E402
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict  # noqa: E402
from verl.single_controller.base.decorator import Dispatch, register  # noqa: E402
from verl.workers.engine.fsdp.transformer_impl import FSDPEngine  # noqa: E402
from verl.workers.engine_workers import TrainingWorker  # noqa: E402

from parity.services.trainer.backends import engine_logprobs  # noqa: E402
from parity.services.trainer.backends.pushed_weights import save_pushed_weights  # noqa: E402
from parity.services.trainer.compute_defaults import tf32_matmuls  # noqa: E402

engine_logprobs.install()

_FULL_ON_CPU = StateDictOptions(full_state_dict=True, cpu_offload=True)


class PolicyWorker(TrainingWorker):
    def __init__(self, config) -> None:
        if not torch.cuda.is_available() and not dist.is_initialized():
            # verl would ask for "cpu:gloo,<device>:<backend>", which on CPU names gloo twice.
            # Ray gave this actor its rank and the group's address in the environment.
            dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
        super().__init__(config)
        if torch.cuda.is_available():
            train_batch = self.engine.train_batch

            def train_batch_in_tf32(*args, **kwargs):
                with tf32_matmuls():
                    return train_batch(*args, **kwargs)

            # Wraps this engine's method where verl calls it; mypy refuses any assignment to a method.
            self.engine.train_batch = train_batch_in_tf32  # type: ignore[method-assign]

    # verl's Dispatch is a DynamicEnum: its modes are registered when verl loads, so no type names them.
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)  # type: ignore[attr-defined]
    def save_hf_weights(self, directory: str) -> None:
        """Every rank contributes its shards; rank 0 writes config and safetensors into `directory`."""
        # The fsdp backend builds verl's FSDP engine (strategy fsdp2).
        assert isinstance(self.engine, FSDPEngine)
        module = self.engine.module
        if hasattr(module, "peft_config"):
            # The adapter alone: its shards are gathered, the frozen base's never are.
            state = {
                name: tensor.full_tensor().cpu() if hasattr(tensor, "full_tensor") else tensor.cpu()
                for name, tensor in module.state_dict().items()
                if "lora_" in name
            }
            if dist.get_rank() == 0:
                module.save_pretrained(directory, state_dict=state)
        else:
            state = get_model_state_dict(module, options=_FULL_ON_CPU)
            if dist.get_rank() == 0:
                # torch types the result for optimizer state too; a model's state dict holds tensors alone.
                save_pushed_weights(module, Path(directory), state)  # type: ignore[arg-type]
        dist.barrier()

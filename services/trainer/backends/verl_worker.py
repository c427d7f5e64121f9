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

A batch packed as prefix trees (`prefix_packing`) carries each token's segment; its micro-batches
reach the model with the trees' attention mask in place of verl's causal one.
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
from verl.workers.engine.fsdp.transformer_impl import FSDPEngine, FSDPEngineWithLMHead  # noqa: E402
from verl.workers.engine_workers import TrainingWorker  # noqa: E402

from parity.services.trainer.backends import engine_logprobs  # noqa: E402
from parity.services.trainer.backends.prefix_packing import tree_attention_mask  # noqa: E402
from parity.services.trainer.backends.pushed_weights import save_pushed_weights  # noqa: E402
from parity.services.trainer.compute_defaults import tf32_matmuls  # noqa: E402

engine_logprobs.install()

_FULL_ON_CPU = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _mask_prefix_trees(engine: FSDPEngineWithLMHead) -> None:
    """Micro-batches that carry prefix trees' segments reach the model with the trees' mask."""
    prepare_model_inputs = engine.prepare_model_inputs

    def prepare_with_tree_mask(micro_batch):
        inputs, output_args = prepare_model_inputs(micro_batch)
        if "segments" in micro_batch:
            # Prefix trees go to the engine only on padded micro-batches, whose mask a 4-D one replaces.
            assert inputs["attention_mask"] is not None, (
                "prefix trees on a padding-free micro-batch"
            )
            width = inputs["input_ids"].shape[1]
            lengths = micro_batch["input_ids"].offsets().diff()
            inputs["attention_mask"] = tree_attention_mask(
                micro_batch["segments"][:, :width], lengths
            )
        return inputs, output_args

    # Wraps this engine's method where verl calls it; mypy refuses any assignment to a method.
    engine.prepare_model_inputs = prepare_with_tree_mask  # type: ignore[method-assign]


class PolicyWorker(TrainingWorker):
    def __init__(self, config) -> None:
        if not torch.cuda.is_available() and not dist.is_initialized():
            # verl would ask for "cpu:gloo,<device>:<backend>", which on CPU names gloo twice.
            # Ray gave this actor its rank and the group's address in the environment.
            dist.init_process_group(
                "gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"])
            )
        super().__init__(config)
        if torch.cuda.is_available():
            train_batch = self.engine.train_batch

            def train_batch_in_tf32(*args, **kwargs):
                with tf32_matmuls():
                    return train_batch(*args, **kwargs)

            # Wraps this engine's method where verl calls it; mypy refuses any assignment to a method.
            self.engine.train_batch = train_batch_in_tf32  # type: ignore[method-assign]
        # The fsdp backend builds verl's FSDP engine with a language-model head (strategy fsdp2).
        assert isinstance(self.engine, FSDPEngineWithLMHead)
        _mask_prefix_trees(self.engine)

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

"""verl's FSDP training engine: the policy sharded with FSDP2 and trained by verl's `TrainingWorker`.

This is the engine verl's own PPO trainer drives (`verl.workers.engine_workers`): the
worker builds the FSDP2-wrapped model and optimizer, packs each batch into nested
(padding-free) micro-batches by a token budget, runs forward and backward with the
loss function it is given, clips and steps, and saves sharded checkpoints. Parity gives
it `policy_loss`, the same loss as the plain loop, through `_EngineLoss`.

The trainer process is rank 0 of a torch.distributed group: a lone process makes a
one-rank group itself (NCCL on a GPU; gloo on CPU, where `verl_cpu_platform` supplies
the device layer verl lacks); `torchrun --nproc-per-node N -m parity.cli trainer serve`
gives every GPU of a node a shard. Past one node, verl's Ray worker groups place these
same workers (see docs/trainer.md).

Batches keep `TrainingBatch`'s shifted layout: verl's prompt is each sequence's first
token and its response the rest, so the engine's response-aligned log-probs line up
with `response_mask` position for position, multi-turn masks included.
"""

from __future__ import annotations

import math
import os
import socket
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from parity.services.trainer.backends.base import TrainingBackend
from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.policy_loss import LossSettings, compute_advantages, policy_loss
from parity.services.trainer.run_settings import RunSettings

ENGINE_CHECKPOINT = "engine"
_FULL_ON_CPU = StateDictOptions(full_state_dict=True, cpu_offload=True)
_FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
# Metrics that are a micro-batch's share of a batch total (the loss is normalised by the
# whole batch's tokens); the others are per-micro-batch means.
_SUMMED_METRICS = ("policy_loss", "kl")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ensure_process_group(on_gpu: bool) -> None:
    if dist.is_initialized():
        return
    # torchrun sets these for each rank; a lone trainer process is a one-rank group.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    if on_gpu:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if on_gpu else "gloo")


def _padded(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_padded_tensor(0.0) if tensor.is_nested else tensor


class _EngineLoss:
    """`policy_loss` in the signature verl's engine calls per micro-batch."""

    def __init__(self, settings: LossSettings) -> None:
        self.settings = settings

    def __call__(self, model_output: dict[str, Any], data: Any, dp_group: Any = None) -> tuple[torch.Tensor, dict]:
        from verl.utils import torch_functional as verl_F
        from verl.workers.utils.padding import no_padding_2_padding

        logprobs = no_padding_2_padding(model_output["log_probs"], data)
        fields = {key: _padded(data[key]) for key in ("response_mask", "old_log_probs", "advantages", "rollout_logprobs")}
        ref = _padded(data["ref_log_prob"]) if "ref_log_prob" in data else None
        mask = fields["response_mask"]
        global_batch = {key: data[key] for key in ("dp_size", "batch_num_tokens", "global_batch_size")}
        loss, metrics = policy_loss(
            logprobs, fields["old_log_probs"], fields["advantages"], mask, fields["rollout_logprobs"],
            self.settings, ref, global_batch,
        )  # fmt: skip
        entropy = no_padding_2_padding(model_output["entropy"], data)
        metrics["entropy"] = float(verl_F.masked_mean(entropy.detach(), mask))
        return loss, metrics


class FsdpBackend(TrainingBackend):
    name = "fsdp"

    def __init__(self, settings: RunSettings) -> None:
        super().__init__(settings)
        on_gpu = torch.cuda.is_available()
        if not on_gpu:
            from parity.services.trainer.backends.verl_cpu_platform import install

            install()
        _ensure_process_group(on_gpu)
        torch.manual_seed(settings.seed)
        self.policy = self._worker(forward_only=False)
        self.policy.set_loss_fn(_EngineLoss(self.loss_settings))
        # verl shards a forward-only engine with FSDP2's CPU offload, which needs an accelerator;
        # on CPU the reference is a training engine that is never stepped.
        self.reference = self._worker(forward_only=on_gpu) if settings.kl_coef > 0 else None
        self.steps = 0

    def _worker(self, forward_only: bool) -> Any:
        from verl.trainer.config import CheckpointConfig
        from verl.workers.config import (
            FSDPEngineConfig,
            FSDPOptimizerConfig,
            HFModelConfig,
            TrainingWorkerConfig,
        )
        from verl.workers.engine_workers import TrainingWorker

        settings = self.settings
        # sdpa: flash-attn is an optional extra verl does not require; without remove-padding the
        # engine feeds sdpa a padded micro-batch and masks it.
        model = HFModelConfig(
            path=str(settings.model_path), use_remove_padding=False, override_config={"attn_implementation": "sdpa"}
        )
        engine = FSDPEngineConfig(
            strategy="fsdp2", forward_only=forward_only, seed=settings.seed, use_torch_compile=False,
            # float32 weights and compute keep the sync probe exact against vLLM serving float32.
            model_dtype="fp32", mixed_precision=dict(_FP32),
            use_dynamic_bsz=True, max_token_len_per_gpu=settings.micro_batch_tokens,
            infer_max_token_len_per_gpu=settings.micro_batch_tokens,
        )  # fmt: skip
        optimizer = FSDPOptimizerConfig(lr=settings.learning_rate, weight_decay=0.0, clip_grad=settings.max_grad_norm)
        worker = TrainingWorker(
            TrainingWorkerConfig(
                model_type="language_model", model_config=model, engine_config=engine,
                optimizer_config=optimizer, checkpoint_config=CheckpointConfig(),
            )  # fmt: skip
        )
        worker.reset()
        return worker

    def _logprobs(self, worker: Any, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        data = _tensordict(ids, attention, torch.ones(ids.shape[0], ids.shape[1] - 1))
        tu.assign_non_tensor(data, compute_loss=False, calculate_entropy=False, temperature=1.0)
        output = worker.infer_batch(data)
        return no_padding_2_padding(tu.get(output, "log_probs"), data).float().cpu()

    def train_step(self, batch: TrainingBatch) -> dict[str, float]:
        from verl.utils import tensordict_utils as tu

        started = time.perf_counter()
        advantages = compute_advantages(batch, self.settings.advantage_estimator)
        # The weights before this update are the PPO "old" policy.
        extra = {"advantages": advantages, "rollout_logprobs": batch.rollout_logprobs}
        extra["old_log_probs"] = self._logprobs(self.policy, batch.input_ids, batch.attention_mask)
        if self.reference is not None:
            extra["ref_log_prob"] = self._logprobs(self.reference, batch.input_ids, batch.attention_mask)
        metrics: dict[str, float] = {}
        for _ in range(self.settings.ppo_epochs):
            data = _tensordict(batch.input_ids, batch.attention_mask, batch.response_mask, **extra)
            tu.assign_non_tensor(data, global_batch_size=batch.size, temperature=1.0, calculate_entropy=True)
            output = tu.get(self.policy.train_batch(data), "metrics")
            grad_norm = float(output["grad_norm"])
            if not math.isfinite(grad_norm):
                # verl's engine has already skipped the optimizer step.
                raise FloatingPointError(f"gradient norm is {grad_norm}; the batch was not applied")
            metrics = _combine_micro_batches(output)
            metrics["grad_norm"] = grad_norm
            metrics["loss"] = float(output["loss"])
        self.steps += 1
        seconds = time.perf_counter() - started
        metrics["train_seconds"] = seconds
        metrics["tokens_per_s"] = batch.token_count * self.settings.ppo_epochs / seconds
        return metrics

    def probe_logprobs(self, token_ids: list[int]) -> list[float]:
        ids = torch.tensor([token_ids], dtype=torch.long)
        return self._logprobs(self.policy, ids, torch.ones_like(ids))[0].double().tolist()

    def save_weights(self, directory: Path) -> None:
        module = self.policy.engine.module
        state = get_model_state_dict(module, options=_FULL_ON_CPU)
        if dist.get_rank() == 0:
            directory.mkdir(parents=True, exist_ok=True)
            module.save_pretrained(directory, state_dict=state, safe_serialization=True)
        dist.barrier()

    def save_state(self, directory: Path) -> None:
        self.save_weights(directory)
        # verl's checkpoint manager: each rank's model, optimizer and RNG shards.
        self.policy.save_checkpoint(str(directory / ENGINE_CHECKPOINT), global_step=self.steps)

    def load_state(self, directory: Path) -> None:
        self.policy.load_checkpoint(str(directory / ENGINE_CHECKPOINT))


def _tensordict(ids: torch.Tensor, attention: torch.Tensor, response_mask: torch.Tensor, **extra: torch.Tensor) -> Any:
    """verl's padded layout (prompt = first token, response = the rest), converted to its padding-free one."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    data = tu.get_tensordict({
        "input_ids": ids, "attention_mask": attention, "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
        "prompts": ids[:, :1], "responses": ids[:, 1:], "response_mask": response_mask, **extra,
    })  # fmt: skip
    return left_right_2_no_padding(data)


def _combine_micro_batches(output: dict[str, Any]) -> dict[str, float]:
    """verl returns each loss metric as a list per rank of lists per micro-batch; reduce them to one number.

    A summed metric is each rank's micro-batch shares added up, and the ranks averaged:
    every rank's share is scaled by the number of ranks, as FSDP averages gradients.
    """
    combined: dict[str, float] = {}
    for key, ranks in output.items():
        if not isinstance(ranks, list) or not ranks:
            continue
        per_rank = [[float(v) for v in (part if isinstance(part, list) else [part])] for part in ranks]
        if key in _SUMMED_METRICS:
            combined[key] = sum(sum(shares) for shares in per_rank) / len(per_rank)
        else:
            values = [v for shares in per_rank for v in shares]
            combined[key] = sum(values) / len(values)
    return combined

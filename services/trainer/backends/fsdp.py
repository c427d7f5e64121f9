"""verl's FSDP training engine: the policy sharded with FSDP2 and trained by verl's `TrainingWorker`.

This is the engine verl's own PPO trainer drives (`verl.workers.engine_workers`): the
worker builds the FSDP2-wrapped model and optimizer, packs each batch into nested
(padding-free) micro-batches by a token budget, runs forward and backward with the
loss function it is given, clips and steps, and saves sharded checkpoints. Parity gives
it `policy_loss`, the same loss as the plain loop, through `_EngineLoss`.

Where the ranks run:

- by default, in the trainer process: a one-rank torch.distributed group (NCCL on a
  GPU; gloo on CPU, where `verl_cpu_platform` supplies the device layer verl lacks);
- with `ray_workers_per_node` > 0, as a verl `RayWorkerGroup` of `PolicyWorker` actors,
  `ray_workers_per_node` on each of `ray_nodes` distinct nodes of the Ray cluster at
  `$RAY_ADDRESS` (or a local one; `ray_placement.py`): the trainer is verl's single controller, each
  actor one FSDP rank holding one GPU. Batches are split across ranks and the loss
  normalised by the whole batch, so the update does not depend on the rank count.

Batches keep `TrainingBatch`'s shifted layout: verl's prompt is each sequence's first
token and its response the rest, so the engine's response-aligned log-probs line up
with `response_mask` position for position, multi-turn masks included.

Per step (docs/design/trainer-gpu-speed.md): with one PPO epoch the old log-probs are the
training pass's own, detached, as the `cpu` loop and verl's own actor take them when a
batch is one on-policy mini-batch, so there is no separate forward pass; the attention
kernel, padding-free micro-batches and gradient checkpointing follow `compute_defaults`;
entropy (a metric, not in the loss) is checkpointed so its softmax is not kept for backward.

With `share_prefixes`, rows that share a prefix of token ids reach the engine packed as prefix
trees (`prefix_packing`): the prefix once, each row's tokens past it after it, and an attention
mask that keeps the rows apart, which `verl_worker` gives the model in place of verl's causal one.
The engine's one forward per packed row then computes each shared prefix once, and the loss,
summed over sampled tokens, is the unshared one.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

import structlog
import torch
import torch.distributed as dist

from parity.services.trainer.backends.base import TrainingBackend
from parity.services.trainer.backends.prefix_packing import (
    PackedTrees,
    pack_prefix_trees,
    sampling_limits,
)
from parity.services.trainer.backends.prefix_tree import shared_prefix_clusters
from parity.services.trainer.backends.shared_prefix import shares_exactly
from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.compute_defaults import attention_layout, needs_gradient_checkpointing
from parity.services.trainer.lora import peft_targets
from parity.services.trainer.policy_loss import LossSettings, compute_advantages, policy_loss
from parity.services.trainer.run_settings import RunSettings

log = structlog.get_logger(__name__)

ENGINE_CHECKPOINT = "engine"
# verl's names for the dtypes a run computes in (`RunSettings.dtype`).
_VERL_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}
# Metrics that are a micro-batch's share of a batch total (the loss is normalised by the
# whole batch's tokens); the others are per-micro-batch means.
_SUMMED_METRICS = ("policy_loss", "kl")
# A tree's attention mask holds a value per pair of its positions, and on a GPU SDPA keeps it as a bias
# in the compute dtype for each layer's backward: 8,192 positions are 128 MiB a layer in bf16.
MAX_TREE_TOKENS = 8192


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ensure_process_group(on_gpu: bool) -> None:
    if dist.is_initialized():
        return
    # The engine runs in this process as a one-rank group, on a free port so trainers on one host do not collide.
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

    def __call__(
        self, model_output: dict[str, Any], data: Any, dp_group: Any = None
    ) -> tuple[torch.Tensor, dict]:
        from verl.utils import torch_functional as verl_F
        from verl.workers.utils.padding import no_padding_2_padding

        logprobs = no_padding_2_padding(model_output["log_probs"], data)
        fields = {
            key: _padded(data[key]) for key in ("response_mask", "advantages", "rollout_logprobs")
        }
        # One epoch: the weights this pass runs on are the PPO "old" policy, so its own log-probs are the old ones.
        old = _padded(data["old_log_probs"]) if "old_log_probs" in data else logprobs.detach()
        ref = _padded(data["ref_log_prob"]) if "ref_log_prob" in data else None
        mask = fields["response_mask"]
        global_batch = {
            key: data[key] for key in ("dp_size", "batch_num_tokens", "global_batch_size")
        }
        loss, metrics = policy_loss(
            logprobs, old, fields["advantages"], mask, fields["rollout_logprobs"],
            self.settings, ref, global_batch,
        )  # fmt: skip
        entropy = no_padding_2_padding(model_output["entropy"], data)
        metrics["entropy"] = float(verl_F.masked_mean(entropy.detach(), mask))
        return loss, metrics


class FsdpBackend(TrainingBackend):
    name = "fsdp"

    def __init__(self, settings: RunSettings) -> None:
        super().__init__(settings)
        self.on_gpu = torch.cuda.is_available()
        # Imported first: on a machine without a GPU it installs verl's CPU platform.
        from parity.services.trainer.backends import verl_worker  # noqa: F401

        self.pool = self._ray_pool() if settings.ray_workers_per_node else None
        if self.pool is None:
            _ensure_process_group(self.on_gpu)
        torch.manual_seed(settings.seed)
        self.policy = self._worker(forward_only=False)
        self.policy.set_loss_fn(_EngineLoss(self.loss_settings))
        # verl shards a forward-only engine with FSDP2's CPU offload, which needs an accelerator;
        # on CPU the reference is a training engine that is never stepped.
        self.reference = self._worker(forward_only=self.on_gpu) if settings.kl_coef > 0 else None
        self.ranks = self.policy.world_size if self.pool is not None else dist.get_world_size()
        self.shares_prefixes = settings.share_prefixes and self._sharing_is_exact()
        self.steps = 0

    def _sharing_is_exact(self) -> bool:
        """Whether prefix trees give this run the unshared update; says why not when they would not."""
        from transformers import AutoConfig

        settings = self.settings
        config = AutoConfig.from_pretrained(settings.model_path)
        reasons = {
            "flash-attn's padding-free micro-batches take no tree mask": attention_layout(self.on_gpu).padding_free,
            f"loss_agg_mode {settings.loss_agg_mode} averages per sample, not per token": settings.loss_agg_mode != "token-mean",
            "LoRA dropout would share one mask across a prefix's rows": bool(settings.lora_dropout),
            "the model has dropout, or layers that do not attend to the whole prefix": not shares_exactly(config),
            # A tree's rows take their positions from position_ids; biases from packed offsets (ALiBi) would not.
            "the model's positions are not rotary": getattr(config, "rope_parameters", None) is None,
        }  # fmt: skip
        unshared = [reason for reason, holds in reasons.items() if holds]
        if unshared:
            log.info("shared_prefixes_off", backend=self.name, why="; ".join(unshared))
        return not unshared

    def _ray_pool(self) -> Any:
        import ray

        from parity.services.trainer.backends.ray_placement import NodeSpreadPool

        settings = self.settings
        # One bundle per rank: a GPU each, and a CPU for each actor on it (the reference
        # policy, when there is one, is colocated with the policy rank holding the same shard).
        colocated = 2 if settings.kl_coef > 0 else 1
        if not ray.is_initialized():
            address = os.environ.get("RAY_ADDRESS")
            # A local cluster counts one logical CPU per core; the actors mostly wait on each other.
            cpus = (
                None
                if address
                else max(os.cpu_count() or 1, settings.ray_workers_per_node * colocated)
            )
            ray.init(address=address, num_cpus=cpus, include_dashboard=False, log_to_driver=True)
        return NodeSpreadPool(
            settings.ray_nodes, settings.ray_workers_per_node, self.on_gpu, colocated
        )

    def _worker(self, forward_only: bool) -> Any:
        from verl.trainer.config import CheckpointConfig
        from verl.workers.config import (
            FSDPEngineConfig,
            FSDPOptimizerConfig,
            HFModelConfig,
            TrainingWorkerConfig,
        )

        from parity.services.trainer.backends.verl_worker import PolicyWorker

        settings = self.settings
        # flash-attn's varlen kernel on packed micro-batches where it is installed, else sdpa on padded ones.
        # verl wraps the model with peft itself when lora_rank > 0, freezing the rest.
        attention = attention_layout(self.on_gpu)
        model = HFModelConfig(
            path=str(settings.model_path), use_remove_padding=attention.padding_free,
            override_config={"attn_implementation": attention.implementation},
            enable_gradient_checkpointing=not forward_only and self._needs_checkpointing(attention.padding_free),
            lora_rank=settings.lora_rank, lora_alpha=settings.lora_alpha, target_modules=peft_targets(settings),
        )  # fmt: skip
        engine = FSDPEngineConfig(
            strategy="fsdp2", forward_only=forward_only, seed=settings.seed, use_torch_compile=False,
            # float32 master weights and gradient reduction, as verl's own actor; forward and
            # backward in the run's dtype (FSDP's MixedPrecisionPolicy param_dtype).
            model_dtype="fp32",
            mixed_precision={"param_dtype": _VERL_DTYPES[settings.dtype], "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
            use_dynamic_bsz=True, max_token_len_per_gpu=settings.micro_batch_tokens,
            infer_max_token_len_per_gpu=settings.micro_batch_tokens, entropy_checkpointing=True,
        )  # fmt: skip
        optimizer = FSDPOptimizerConfig(
            lr=settings.lr, weight_decay=0.0, clip_grad=settings.max_grad_norm
        )
        config = TrainingWorkerConfig(
            model_type="language_model", model_config=model, engine_config=engine,
            optimizer_config=optimizer, checkpoint_config=CheckpointConfig(),
        )  # fmt: skip
        # A Ray worker group answers the worker's calls through methods it binds at run time, which no type names.
        worker: Any
        if self.pool is None:
            worker = PolicyWorker(config)
        else:
            import ray
            from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup

            from parity.services.trainer.backends.ray_placement import rank_nodes

            worker = RayWorkerGroup(
                resource_pool=self.pool, ray_cls_with_init=RayClassWithInitArgs(ray.remote(PolicyWorker), config=config),
                device_name="cuda" if self.on_gpu else "cpu",
            )  # fmt: skip
            log.info("ray_ranks", forward_only=forward_only, nodes=rank_nodes(worker))
        worker.reset()
        return worker

    def _needs_checkpointing(self, padding_free: bool) -> bool:
        """Only on a GPU whose memory one micro-batch's activations would overflow (`compute_defaults`)."""
        if not self.on_gpu:
            return False
        config = json.loads((self.settings.model_path / "config.json").read_text())
        return needs_gradient_checkpointing(
            config, self.settings.micro_batch_tokens, self.settings.dtype,
            torch.cuda.get_device_properties(0).total_memory, padding_free, lora=bool(self.settings.lora_rank),
        )  # fmt: skip

    def _logprobs(
        self,
        worker: Any,
        ids: torch.Tensor,
        attention: torch.Tensor,
        trees: PackedTrees | None = None,
    ) -> torch.Tensor:
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        rows = ids.shape[0]
        ones = torch.ones(rows, ids.shape[1] - 1)
        if trees is None:
            ids, attention, ones = _pad_rows(self.ranks, ids, attention, ones)
            data = _tensordict(ids, attention, ones)
        else:
            ids, attention, ones, positions, segments = _pad_rows(
                self.ranks, ids, attention, ones, trees.position_ids, trees.segments
            )
            data = _tensordict(ids, attention, ones, positions, segments=segments)
        tu.assign_non_tensor(data, compute_loss=False, calculate_entropy=False, temperature=1.0)
        output = _resolved(worker.infer_batch(data))
        return no_padding_2_padding(tu.get(output, "log_probs"), data)[:rows].float().cpu()

    def train_step(self, batch: TrainingBatch) -> dict[str, float]:
        from verl.utils import tensordict_utils as tu

        started = time.perf_counter()
        advantages = compute_advantages(
            batch, self.settings.advantage_estimator, self.signal_weights
        )
        trees = self._prefix_trees(batch)
        ids, attention = (
            (batch.input_ids, batch.attention_mask)
            if trees is None
            else (trees.input_ids, trees.attention_mask)
        )
        # The weights before this update are the PPO "old" policy.
        per_token = {
            "response_mask": batch.response_mask,
            "advantages": advantages,
            "rollout_logprobs": batch.rollout_logprobs,
        }
        if trees is not None:
            per_token = {name: trees.pack(values) for name, values in per_token.items()}
        if self.settings.ppo_epochs > 1:
            # Later epochs need the log-probs of the weights before the first; one epoch takes its own (_EngineLoss).
            per_token["old_log_probs"] = self._logprobs(self.policy, ids, attention, trees)
        if self.reference is not None:
            per_token["ref_log_prob"] = self._logprobs(self.reference, ids, attention, trees)
        if trees is not None:
            per_token |= {"position_ids": trees.position_ids, "segments": trees.segments}
        names = list(per_token)
        ids, attention, *values = _pad_rows(self.ranks, ids, attention, *per_token.values())
        fields = dict(zip(names, values, strict=True))
        mask, positions = fields.pop("response_mask"), fields.pop("position_ids", None)
        metrics: dict[str, float] = {}
        for _ in range(self.settings.ppo_epochs):
            # A fresh tensordict each epoch: verl's worker writes its own keys into the one it trains on.
            data = _tensordict(ids, attention, mask, positions, **fields)
            tu.assign_non_tensor(
                data, global_batch_size=batch.size, temperature=1.0, calculate_entropy=True
            )
            output = tu.get(_resolved(self.policy.train_batch(data)), "metrics")
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
        # What one pass's forward ran over, against the samples' own tokens.
        metrics["tokens_trained"] = float(batch.token_count)
        metrics["tokens_computed"] = float(
            batch.token_count if trees is None else trees.token_count
        )
        return metrics

    def _prefix_trees(self, batch: TrainingBatch) -> PackedTrees | None:
        """The batch packed as prefix trees, or None where it shares nothing (it then trains as it is)."""
        if not self.shares_prefixes:
            return None
        limits = sampling_limits(batch.response_mask)
        clusters = shared_prefix_clusters(batch.input_ids, batch.attention_mask, limits=limits)
        budget = min(self.settings.micro_batch_tokens, MAX_TREE_TOKENS)
        trees = pack_prefix_trees(
            batch.input_ids, batch.attention_mask, batch.response_mask, clusters, budget
        )
        return trees if trees.shares else None

    def probe_logprobs(self, token_ids: list[int]) -> list[float]:
        ids = torch.tensor([token_ids], dtype=torch.long)
        return self._logprobs(self.policy, ids, torch.ones_like(ids))[0].double().tolist()

    def save_weights(self, directory: Path) -> None:
        # With Ray workers on several nodes, rank 0 writes: `directory` must be on storage it shares with vLLM.
        self.policy.save_hf_weights(str(directory))

    def save_state(self, directory: Path) -> None:
        self.save_weights(directory)
        # verl's checkpoint manager: each rank's model, optimizer and RNG shards.
        self.policy.save_checkpoint(str(directory / ENGINE_CHECKPOINT), global_step=self.steps)

    def load_state(self, directory: Path) -> None:
        self.policy.load_checkpoint(str(directory / ENGINE_CHECKPOINT))

    def close(self) -> None:
        if self.pool is None:
            return
        import ray
        from ray.util import remove_placement_group

        for group in (self.policy, self.reference):
            for actor in group.workers if group is not None else []:
                ray.kill(actor)
        for placement in self.pool.pgs or []:
            remove_placement_group(placement)


def _resolved(output: Any) -> Any:
    """A Ray worker group answers with a future (verl dispatches non-blocking); a local worker with the value."""
    from tensordict import TensorDictBase

    return output if isinstance(output, TensorDictBase) else output.get()


def _pad_rows(
    multiple: int, ids: torch.Tensor, attention: torch.Tensor, *per_token: torch.Tensor
) -> list[torch.Tensor]:
    """Add rows until the count divides among the ranks: two real tokens each, nothing to learn from.

    verl splits a batch into equal shares per data-parallel rank. A filler row has an
    empty response mask, so it adds no tokens to the loss or its normaliser.
    """
    missing = -ids.shape[0] % multiple
    if not missing:
        return [ids, attention, *per_token]
    filler_ids = torch.zeros(missing, ids.shape[1], dtype=ids.dtype)
    filler_ids[:, :2] = ids[0, :2]
    filler_attention = torch.zeros(missing, attention.shape[1], dtype=attention.dtype)
    filler_attention[:, :2] = 1
    padded = [torch.cat([ids, filler_ids]), torch.cat([attention, filler_attention])]
    padded += [torch.cat([t, torch.zeros(missing, *t.shape[1:], dtype=t.dtype)]) for t in per_token]
    return padded


def _tensordict(
    ids: torch.Tensor,
    attention: torch.Tensor,
    response_mask: torch.Tensor,
    positions: torch.Tensor | None = None,
    **extra: torch.Tensor,
) -> Any:
    """verl's padded layout (prompt = first token, response = the rest), converted to its padding-free one.
    `positions` default to each row's own count; prefix trees give theirs."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    if positions is None:
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
    data = tu.get_tensordict({
        "input_ids": ids, "attention_mask": attention, "position_ids": positions,
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
        per_rank = [
            [float(v) for v in (part if isinstance(part, list) else [part])] for part in ranks
        ]
        if key in _SUMMED_METRICS:
            combined[key] = sum(sum(shares) for shares in per_rank) / len(per_rank)
        else:
            values = [v for shares in per_rank for v in shares]
            combined[key] = sum(values) / len(values)
    return combined

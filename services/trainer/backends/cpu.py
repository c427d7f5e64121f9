"""The plain-loop path: one Hugging Face model trained in this process, on CPU.

Weights and AdamW state are float32. With `dtype` bfloat16 each forward runs on a
bfloat16 cast of the weights and the gradients flow back to the float32 ones, as
FSDP's mixed precision (`param_dtype` bf16) does in the `fsdp` backend, so both
backends compute the same numbers and the probe sees what a bf16 vLLM serves.

verl's FSDP engine runs on CPU too (the `fsdp` backend, through `verl_cpu_platform`);
`auto` picks this loop on a machine without a GPU because it skips the engine's
per-step machinery (nested-tensor packing, verl's data protocol; `bench/trainer.py`
measures both). It computes advantages with verl's estimators and the loss with the
same `policy_loss` as the engine path, in micro-batches whose losses are normalised by
the whole batch, as the engine's are.

With `share_prefixes` (the default), rows that share a prefix of token ids (`prefix_tree`)
compute it once: its forward runs once per cluster and each branch reuses its keys and values
(`shared_prefix`), with the same loss, metrics and gradients as whole rows.

A LoRA run (`lora_rank` > 0) wraps the model with peft, as verl's engine does: the
base weights are frozen, only the adapter's go into the optimizer, and the weights
written for vLLM, and checkpointed, are the adapter alone.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch.func import functional_call
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from parity.services.trainer.backends.base import TrainingBackend
from parity.services.trainer.backends.prefix_tree import (
    PrefixCluster,
    check_prefix_tree,
    shared_prefix_clusters,
)
from parity.services.trainer.backends.pushed_weights import save_pushed_weights
from parity.services.trainer.backends.shared_base import SharedBase
from parity.services.trainer.backends.shared_prefix import (
    ModelCall,
    SharedPrefix,
    first_sampled_position,
    shares_exactly,
)
from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.lora import ADAPTER_WEIGHTS, lora_config, save_adapter
from parity.services.trainer.policy_loss import compute_advantages, policy_loss, token_logprobs
from parity.services.trainer.run_settings import RunSettings

if TYPE_CHECKING:
    from peft import PeftModel

OPTIMIZER_FILE = "optimizer.pt"
# Padded positions per micro-batch. On CPU a step is bound by arithmetic, not by launch overhead, so small
# micro-batches cost nothing and keep activations to a few hundred MB (SmolLM2-135M: a 32-sample agent batch
# padded whole took 12 GB).
MICRO_BATCH_TOKENS = 2048
# policy_loss's metrics that are shares of the batch's loss (summed over micro-batches); the rest are means.
SUMMED_METRICS = frozenset({"policy_loss", "kl"})
# A branch row holds its own copy of its prefix's keys and values, two of the many tensors per layer
# and position that a computed position keeps for backward: a prefix position counts as this share of one.
PREFIX_POSITION_SHARE = 8


def micro_batch_rows(
    lengths: torch.Tensor, rows: list[int], token_budget: int, shared: int = 0
) -> list[torch.Tensor]:
    """`rows` grouped by length so that each group, padded to its own longest row, holds at most
    `token_budget` positions (a row longer than the budget goes alone). Agents' samples differ in
    length by turns and tool results; padding all of them to the longest wastes a large share of a
    step, and activation memory grows with the padded batch. Rows past a `shared` prefix computed
    once count its positions at `PREFIX_POSITION_SHARE`."""
    order = sorted(rows, key=lambda row: -int(lengths[row]))
    groups: list[list[int]] = []
    for row in order:
        longest = (
            int(lengths[groups[-1][0]]) - shared + shared // PREFIX_POSITION_SHARE if groups else 0
        )
        if groups and longest * (len(groups[-1]) + 1) <= token_budget:
            groups[-1].append(row)
        else:
            groups.append([row])
    return [torch.tensor(sorted(group)) for group in groups]


@dataclass
class MicroBatch:
    """Some rows of a batch, cut to their own longest row."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    advantages: torch.Tensor
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None

    @classmethod
    def of(cls, batch: TrainingBatch, advantages: torch.Tensor, rows: torch.Tensor) -> MicroBatch:
        length = int(batch.attention_mask[rows].sum(dim=1).max())
        return cls(
            batch.input_ids[rows, :length], batch.attention_mask[rows, :length], batch.response_mask[rows, : length - 1],
            batch.rollout_logprobs[rows, : length - 1], advantages[rows, : length - 1],
        )  # fmt: skip


@dataclass
class PieceGroup:
    """Micro-batches computed together: the branches of one shared prefix, or (`cluster` None) rows that share none."""

    cluster: PrefixCluster | None
    pieces: list[MicroBatch] = field(default_factory=list)

    def shared_prefix(self, call: ModelCall, config: PretrainedConfig) -> SharedPrefix | None:
        """The cluster's prefix forward, its head from the first position any of its rows samples."""
        if self.cluster is None:
            return None
        head_from = min(first_sampled_position(piece.response_mask) for piece in self.pieces)
        return SharedPrefix(call, config, torch.tensor(self.cluster.prefix), head_from)


def plan_pieces(
    batch: TrainingBatch, advantages: torch.Tensor, share_prefixes: bool
) -> list[PieceGroup]:
    """The batch's micro-batches, grouped by the prefix their rows share (checked against the rows' ids)."""
    clusters = (
        shared_prefix_clusters(batch.input_ids, batch.attention_mask) if share_prefixes else []
    )
    check_prefix_tree(batch.input_ids, batch.attention_mask, clusters)
    lengths = batch.attention_mask.sum(dim=1)
    clustered = {row for cluster in clusters for row in cluster.rows}
    groups = [
        PieceGroup(cluster, [MicroBatch.of(batch, advantages, rows)
                             for rows in micro_batch_rows(lengths, list(cluster.rows), MICRO_BATCH_TOKENS, cluster.prefix_length)])
        for cluster in clusters
    ]  # fmt: skip
    alone = [row for row in range(batch.size) if row not in clustered]
    if alone:
        rows = micro_batch_rows(lengths, alone, MICRO_BATCH_TOKENS)
        groups.append(PieceGroup(None, [MicroBatch.of(batch, advantages, r) for r in rows]))
    return groups


class CpuBackend(TrainingBackend):
    name = "cpu"

    def __init__(self, settings: RunSettings, base: SharedBase | None = None) -> None:
        super().__init__(settings)
        torch.manual_seed(settings.seed)
        self.compute_dtype = getattr(torch, settings.dtype)
        self.base = base
        self.adapter = ""
        self.model: PreTrainedModel | PeftModel
        self.reference: PreTrainedModel | None
        if base is not None:
            # One of several LoRA runs on one frozen base: this run's adapter is one of the base's.
            self.adapter = base.add_adapter(lora_config(settings))
            self.model = base.model
            self.reference = base.reference() if settings.kl_coef > 0 else None
            self.trained = base.parameters_of(self.adapter)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(
                settings.model_path, dtype=torch.float32
            )
            self.reference = (
                copy.deepcopy(self.model).eval().requires_grad_(False)
                if settings.kl_coef > 0
                else None
            )
            if settings.lora_rank:
                from peft import get_peft_model

                self.model = get_peft_model(self.model, lora_config(settings))
            self.trained = [param for param in self.model.parameters() if param.requires_grad]
        # Exact only where each branch sees what its whole row would: every layer caches the whole prefix,
        # and no dropout draws a mask per row (a shared prefix would share one).
        self.shares_prefixes = (
            settings.share_prefixes
            and not settings.lora_dropout
            and shares_exactly(self.model.config)
        )
        self.optimizer = torch.optim.AdamW(self.trained, lr=settings.lr, weight_decay=0.0)

    def _forward(
        self,
        call: ModelCall,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        response_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logprob of each next token and the entropy at each position, (batch, length-1).

        With `response_mask`, the output head runs only from the batch's first sampled position
        on (zeros before it): an agent's prompt (system, examples, the question) is most of each
        sequence, and the head, log-softmax and entropy over the whole vocabulary at every prompt
        position were about half of a step on SmolLM2-135M."""
        first = first_sampled_position(response_mask) if response_mask is not None else 0
        keep = torch.arange(first, input_ids.shape[1])
        logits = call(
            input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep
        ).logits
        logprobs, entropy = token_logprobs(logits, input_ids[:, first:])
        return torch.nn.functional.pad(logprobs, (first, 0)), torch.nn.functional.pad(
            entropy, (first, 0)
        )

    def _call(self, model: torch.nn.Module) -> ModelCall:
        """The model's forward in the run's compute dtype, for one pass over the batch.

        The weights are cast once per pass, not per forward: every micro-batch's backward flows
        through the same casts (they keep no tensors for backward) into the float32 weights'
        gradients, which accumulate in float32."""
        if self.compute_dtype == torch.float32:
            return model
        # Tied parameters stay tied in the cast (functional_call's tie_weights).
        cast = {name: param.to(self.compute_dtype) for name, param in model.named_parameters()}

        def cast_call(**inputs: object) -> object:
            return functional_call(model, cast, args=(), kwargs=inputs)

        return cast_call

    def _piece_forward(
        self, call: ModelCall, piece: MicroBatch, prefix: SharedPrefix | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if prefix is None:
            return self._forward(call, piece.input_ids, piece.attention_mask, piece.response_mask)
        return prefix.branch_logprobs(piece.input_ids, piece.attention_mask, piece.response_mask)

    def _activate(self) -> None:
        """On a shared base, make this run's adapter the one that computes (the caller holds the base's lock)."""
        if self.base is not None:
            self.base.activate(self.adapter)

    def train_step(self, batch: TrainingBatch) -> dict[str, float]:
        started = time.perf_counter()
        self._activate()
        self.model.train()
        advantages = compute_advantages(
            batch, self.settings.advantage_estimator, self.signal_weights
        )
        groups = plan_pieces(batch, advantages, self.shares_prefixes)
        pieces = [piece for group in groups for piece in group.pieces]
        # Each piece's loss is normalised by the whole batch, so their summed gradients are the batch's own.
        whole: dict[str, float] = {
            "dp_size": 1,
            "batch_num_tokens": int(batch.response_mask.sum()),
            "global_batch_size": batch.size,
        }
        if self.reference is not None:
            with torch.no_grad():
                reference = self._call(self.reference)
                for group in groups:
                    prefix = group.shared_prefix(reference, self.reference.config)
                    for piece in group.pieces:
                        piece.ref_logprobs, _ = self._piece_forward(reference, piece, prefix)
                del reference  # its cast of the weights, if any
        metrics: dict[str, float] = {}
        for _ in range(self.settings.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            totals: dict[str, float] = {}
            call = self._call(self.model)
            for group in groups:
                prefix = group.shared_prefix(call, self.model.config)
                for piece in group.pieces:
                    logprobs, entropy = self._piece_forward(call, piece, prefix)
                    if piece.old_logprobs is None:
                        # The first pass runs on the weights that the behaviour policy's
                        # successor holds, so its logprobs are the PPO "old" policy.
                        piece.old_logprobs = logprobs.detach()
                    loss, piece_metrics = policy_loss(
                        logprobs, piece.old_logprobs, piece.advantages, piece.response_mask, piece.rollout_logprobs,
                        self.loss_settings, piece.ref_logprobs, whole,
                    )  # fmt: skip
                    loss.backward()
                    share = float(piece.response_mask.sum()) / max(1, whole["batch_num_tokens"])
                    for key, value in piece_metrics.items():
                        # Losses are already shares of the batch's; means are weighted by the piece's tokens.
                        totals[key] = totals.get(key, 0.0) + (
                            value if key in SUMMED_METRICS else value * share
                        )
                    entropy_sum = float((entropy.detach() * piece.response_mask).sum())
                    totals["entropy"] = totals.get("entropy", 0.0) + entropy_sum / max(
                        1, whole["batch_num_tokens"]
                    )
                if prefix is not None:
                    prefix.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.trained, self.settings.max_grad_norm)
            if not torch.isfinite(grad_norm):
                raise FloatingPointError(
                    f"gradient norm is {float(grad_norm)}; the batch was not applied"
                )
            self.optimizer.step()
            metrics = totals | {"grad_norm": float(grad_norm)}
        metrics["loss"] = metrics["policy_loss"] + self.settings.kl_coef * metrics.get("kl", 0.0)
        seconds = time.perf_counter() - started
        metrics["train_seconds"] = seconds
        metrics["tokens_per_s"] = batch.token_count * self.settings.ppo_epochs / seconds
        metrics["micro_batches"] = float(len(pieces))
        # What one pass's forward ran over, against the samples' own tokens.
        metrics["tokens_trained"] = float(batch.token_count)
        metrics["tokens_computed"] = float(
            batch.token_count - sum(g.cluster.tokens_saved for g in groups if g.cluster)
        )
        return metrics

    @torch.no_grad()
    def probe_logprobs(self, token_ids: list[int]) -> list[float]:
        self._activate()
        self.model.eval()
        logprobs, _ = self._forward(
            self._call(self.model), torch.tensor([token_ids], dtype=torch.long)
        )
        return logprobs[0].double().tolist()

    def save_weights(self, directory: Path) -> None:
        if self.base is not None:
            save_adapter(self.base.model, self.adapter, directory)
        elif isinstance(self.model, PreTrainedModel):
            save_pushed_weights(self.model, directory)
        else:
            # LoRA: peft writes the adapter alone.
            self.model.save_pretrained(str(directory))

    def close(self) -> None:
        if self.base is not None:
            with self.base.lock:
                self.base.remove_adapter(self.adapter)

    def save_state(self, directory: Path) -> None:
        self.save_weights(directory)
        torch.save(self.optimizer.state_dict(), directory / OPTIMIZER_FILE)

    def load_state(self, directory: Path) -> None:
        from safetensors.torch import load_file

        self._activate()
        if self.settings.lora_rank:
            from peft import set_peft_model_state_dict

            # peft annotates the result as `namedtuple`, a function; it is torch's load_state_dict result.
            unexpected = set_peft_model_state_dict(
                self.model,
                load_file(directory / ADAPTER_WEIGHTS),
                adapter_name=self.adapter or "default",
            ).unexpected_keys  # type: ignore[attr-defined]
            if unexpected:
                raise ValueError(
                    f"checkpoint {directory} does not match the adapter: unexpected {unexpected}"
                )
            self.optimizer.load_state_dict(
                torch.load(directory / OPTIMIZER_FILE, weights_only=True)
            )
            return
        state = {}
        for path in sorted(directory.glob("*.safetensors")):
            state.update(load_file(path))
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        # Untied checkpoints hold every parameter; a tied head may be absent and is fine.
        if unexpected or [m for m in missing if not m.endswith("lm_head.weight")]:
            raise ValueError(
                f"checkpoint {directory} does not match the model: missing {missing}, unexpected {unexpected}"
            )
        self.optimizer.load_state_dict(torch.load(directory / OPTIMIZER_FILE, weights_only=True))

"""bench/trainer.py's baseline: a plain PyTorch training loop, no engine, on the same batch and loss as the backends."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.compute_defaults import resolve_dtype, tf32_matmuls
from parity.services.trainer.policy_loss import (
    LossSettings,
    compute_advantages,
    policy_loss,
    token_logprobs,
)
from parity.services.trainer.run_settings import RunSettings


class PlainLoop:
    """The baseline: one Hugging Face model on the device, AdamW, and `policy_loss`; nothing else.

    Float32 weights and optimizer state; forward and backward under autocast in the run's
    dtype (as FSDP's mixed precision computes); rows sorted by length into micro-batches of
    at most `micro_batch_tokens` padded positions; the old log-probs are the first pass's own
    (one PPO epoch), as the `cpu` backend takes them.
    """

    name = "plain"

    def __init__(self, settings: RunSettings, device: torch.device) -> None:
        from transformers import AutoModelForCausalLM

        torch.manual_seed(settings.seed)
        self.settings, self.device = settings, device
        self.dtype = getattr(torch, resolve_dtype(settings.dtype))
        # transformers types PreTrainedModel.to as a wrapper of nn.Module.to whose first argument is the model.
        self.model = AutoModelForCausalLM.from_pretrained(
            settings.model_path, dtype=torch.float32, attn_implementation="sdpa"
        ).to(device)  # type: ignore[arg-type]
        fused: dict[str, Any] = {"fused": True} if device.type == "cuda" else {}
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=settings.lr, weight_decay=0.0, **fused
        )
        self.loss_settings = LossSettings(
            settings.clip_ratio, settings.tis_cap, 0.0, settings.loss_agg_mode
        )

    def micro_batches(self, batch: TrainingBatch) -> list[torch.Tensor]:
        lengths = batch.attention_mask.sum(dim=1)
        groups: list[list[int]] = []
        for row in torch.argsort(lengths, descending=True).tolist():
            if (
                groups
                and int(lengths[groups[-1][0]]) * (len(groups[-1]) + 1)
                <= self.settings.micro_batch_tokens
            ):
                groups[-1].append(row)
            else:
                groups.append([row])
        return [torch.tensor(group) for group in groups]

    def train_step(self, batch: TrainingBatch) -> dict[str, float]:
        # float32 matmuls on TF32 tensor cores on CUDA, as the engine's training passes run them.
        with tf32_matmuls() if self.device.type == "cuda" else contextlib.nullcontext():
            return self._train_step(batch)

    def _train_step(self, batch: TrainingBatch) -> dict[str, float]:
        self.model.train()
        advantages = compute_advantages(batch, self.settings.advantage_estimator)
        whole: dict[str, float] = {
            "dp_size": 1,
            "batch_num_tokens": int(batch.response_mask.sum()),
            "global_batch_size": batch.size,
        }
        for rows in self.micro_batches(batch):
            length = int(batch.attention_mask[rows].sum(dim=1).max())
            ids, attention = (
                t[rows, :length].to(self.device) for t in (batch.input_ids, batch.attention_mask)
            )
            mask, rollout, adv = (
                t[rows, : length - 1].to(self.device)
                for t in (batch.response_mask, batch.rollout_logprobs, advantages)
            )
            with torch.autocast(
                self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32
            ):
                logits = self.model(input_ids=ids, attention_mask=attention).logits
            logprobs, _entropy = token_logprobs(logits, ids)
            loss, _ = policy_loss(
                logprobs, logprobs.detach(), adv, mask, rollout, self.loss_settings, None, whole
            )
            loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), self.settings.max_grad_norm
        )
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": float(grad_norm)}

    def probe_logprobs(self, token_ids: list[int]) -> list[float]:
        ids = torch.tensor([token_ids], device=self.device)
        with (
            torch.no_grad(),
            torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32),
        ):
            logprobs, _ = token_logprobs(self.model(ids).logits, ids)
        return logprobs[0].double().tolist()

    def save_weights(self, directory: Path) -> None:
        self.model.save_pretrained(directory)

    def close(self) -> None:
        """Nothing outlives the loop."""

"""The interface every training backend implements, and the update step they share.

A backend owns the policy's parameters and optimizer. It trains on `TrainingBatch`es
with the loss in `policy_loss` (so the CPU path and the GPU path optimise the same
objective), scores probe sequences for weight-sync verification, writes weights in
the Hugging Face safetensors layout vLLM loads, and saves and restores its full state.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from pathlib import Path

import torch
from verl.utils import torch_functional as verl_F

from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.policy_loss import (
    LossSettings,
    compute_advantages,
    policy_loss,
    token_logprobs,
)
from parity.services.trainer.run_settings import RunSettings

OPTIMIZER_FILE = "optimizer.pt"


class TrainingBackend(ABC):
    name: str

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self.loss_settings = LossSettings(settings.clip_ratio, settings.tis_cap, settings.kl_coef, settings.loss_agg_mode)

    @abstractmethod
    def train_step(self, batch: TrainingBatch) -> dict[str, float]:
        """One update on the batch; returns the step's metrics (policy_loss, entropy, grad_norm, ...)."""

    @abstractmethod
    def probe_logprobs(self, token_ids: list[int]) -> list[float]:
        """Logprob of each token after the first under the current weights, as vLLM's prompt logprobs give them."""

    @abstractmethod
    def save_weights(self, directory: Path) -> None:
        """Write config and safetensors weights that vLLM's reload_weights reads."""

    @abstractmethod
    def save_state(self, directory: Path) -> None:
        """Weights and optimizer state, enough to resume training exactly."""

    @abstractmethod
    def load_state(self, directory: Path) -> None:
        """Restore what save_state wrote."""


class TorchPolicyBackend(TrainingBackend):
    """A Hugging Face causal LM trained in this process on one device; subclasses choose the device and wrapping."""

    device: torch.device

    def __init__(self, settings: RunSettings, model: torch.nn.Module, reference: torch.nn.Module | None) -> None:
        super().__init__(settings)
        self.model = model
        self.reference = reference
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.0)

    def _forward(self, model: torch.nn.Module, batch: TrainingBatch) -> tuple[torch.Tensor, torch.Tensor]:
        ids = batch.input_ids.to(self.device)
        logits = model(input_ids=ids, attention_mask=batch.attention_mask.to(self.device)).logits
        logprobs, entropy = token_logprobs(logits, ids)
        return logprobs.cpu(), entropy.cpu()

    def train_step(self, batch: TrainingBatch) -> dict[str, float]:
        started = time.perf_counter()
        self.model.train()
        advantages = compute_advantages(batch, self.settings.advantage_estimator)
        ref_logprobs = None
        if self.reference is not None:
            with torch.no_grad():
                ref_logprobs, _ = self._forward(self.reference, batch)
        old_logprobs: torch.Tensor | None = None
        metrics: dict[str, float] = {}
        for _ in range(self.settings.ppo_epochs):
            logprobs, entropy = self._forward(self.model, batch)
            if old_logprobs is None:
                # The first pass runs on the weights that the behaviour policy's
                # successor holds, so its logprobs are the PPO "old" policy.
                old_logprobs = logprobs.detach()
            loss, metrics = policy_loss(logprobs, old_logprobs, advantages, batch, self.loss_settings, ref_logprobs)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.max_grad_norm)
            if not torch.isfinite(grad_norm):
                raise FloatingPointError(f"gradient norm is {float(grad_norm)}; the batch was not applied")
            self.optimizer.step()
            metrics["grad_norm"] = float(grad_norm)
            metrics["entropy"] = float(verl_F.masked_mean(entropy.detach(), batch.response_mask))
        metrics["loss"] = metrics["policy_loss"] + self.settings.kl_coef * metrics.get("kl", 0.0)
        seconds = time.perf_counter() - started
        metrics["train_seconds"] = seconds
        metrics["tokens_per_s"] = batch.token_count * self.settings.ppo_epochs / seconds
        return metrics

    @torch.no_grad()
    def probe_logprobs(self, token_ids: list[int]) -> list[float]:
        self.model.eval()
        ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)
        logprobs, _ = token_logprobs(self.model(input_ids=ids).logits, ids)
        return logprobs[0].double().cpu().tolist()

    def save_state(self, directory: Path) -> None:
        self.save_weights(directory)
        torch.save(self.optimizer.state_dict(), directory / OPTIMIZER_FILE)

    def load_state(self, directory: Path) -> None:
        from safetensors.torch import load_file

        state = {}
        for path in sorted(directory.glob("*.safetensors")):
            state.update(load_file(path))
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        # Untied checkpoints hold every parameter; a tied head may be absent and is fine.
        if unexpected or [m for m in missing if not m.endswith("lm_head.weight")]:
            raise ValueError(f"checkpoint {directory} does not match the model: missing {missing}, unexpected {unexpected}")
        self.optimizer.load_state_dict(torch.load(directory / OPTIMIZER_FILE, weights_only=True))

"""The interface every training backend implements.

A backend owns the policy's parameters and optimizer. It trains on `TrainingBatch`es
with the loss in `policy_loss` (so every backend optimises the same objective), scores
probe sequences for weight-sync verification, writes weights in the Hugging Face
safetensors layout vLLM loads, and saves and restores its full state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.policy_loss import LossSettings, SignalWeights
from parity.services.trainer.run_settings import RunSettings


class TrainingBackend(ABC):
    name: str

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self.loss_settings = LossSettings(
            settings.clip_ratio, settings.tis_cap, settings.kl_coef, settings.loss_agg_mode
        )
        self.signal_weights = signal_weights(settings)

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

    def close(self) -> None:  # noqa: B027 - most backends hold nothing beyond themselves
        """Release what outlives this object (Ray actors and the GPUs they hold); a no-op by default."""


def signal_weights(settings: RunSettings) -> SignalWeights:
    return SignalWeights(
        reward=settings.reward_coef, teacher=settings.teacher_coef if settings.teacher else 0.0
    )

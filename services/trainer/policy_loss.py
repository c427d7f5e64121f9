"""Advantages and the policy loss, from verl's registered algorithms; every backend calls these.

The loss is verl's PPO clip ("vanilla") with truncated importance sampling: each
token is weighted by min(pi_old / pi_rollout, tis_cap), computed by verl's rollout
correction helper from the logprobs vLLM reported when it sampled the token. That
corrects for the gap between the policy that generated a sample (one or more
versions behind in async mode, or a numerically different engine) and the policy
being trained.

verl is imported by the first function that needs it, not with this module: importing it
costs a process about 9 s of CPU, which a trainer pays only once a run trains, not to
start, answer health checks or refuse a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from parity.services.trainer.batch_tensors import TrainingBatch

if TYPE_CHECKING:
    from verl.workers.config import ActorConfig


@dataclass(frozen=True)
class LossSettings:
    clip_ratio: float
    tis_cap: float
    kl_coef: float
    loss_agg_mode: str


@dataclass(frozen=True)
class SignalWeights:
    """How a run weighs its two signals in each sampled token's advantage."""

    reward: float = 1.0
    """The reward's advantage, from the estimator."""
    teacher: float = 0.0
    """A distillation teacher's per-token signal; used only on batches the teacher scored."""


def compute_advantages(
    batch: TrainingBatch, estimator: str, weights: SignalWeights = SignalWeights()
) -> torch.Tensor:
    """(batch, length-1) advantages, zero off the response mask: verl's registered estimator's, and with
    a teacher, plus each sampled token's teacher logprob minus the student's logprob as it was sampled
    (the negative per-token reverse KL, as on-policy distillation trains on)."""
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos

    advantages = torch.zeros_like(batch.response_mask)
    if weights.reward:
        estimate = core_algos.get_adv_estimator_fn(estimator)
        estimated, _returns = estimate(
            token_level_rewards=batch.token_rewards, response_mask=batch.response_mask, index=batch.group_index,
            config=AlgoConfig(adv_estimator=estimator, gamma=1.0),
        )  # fmt: skip
        advantages = weights.reward * estimated
    if batch.teacher_logprobs is not None and weights.teacher:
        advantages = advantages + weights.teacher * (
            batch.teacher_logprobs - batch.rollout_logprobs
        )
    return advantages * batch.response_mask


def teacher_kl(batch: TrainingBatch) -> float:
    """The mean over sampled tokens of student minus teacher logprob: the sampled estimate of the
    reverse KL from student to teacher, 0 where the student samples as the teacher would."""
    assert batch.teacher_logprobs is not None
    mask = batch.response_mask
    return float(
        ((batch.rollout_logprobs - batch.teacher_logprobs) * mask).sum() / mask.sum().clamp(min=1)
    )


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprob of each next token and the entropy at each position: both (batch, length-1)."""
    from verl.utils import torch_functional as verl_F

    logits = logits[:, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    chosen = logprobs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    entropy = verl_F.entropy_from_logits(logits)
    return chosen, entropy


def _actor_config(
    settings: LossSettings, rows: int, global_batch: dict[str, float] | None
) -> ActorConfig:
    from verl.workers.config import ActorConfig

    config = ActorConfig(
        strategy="fsdp", clip_ratio=settings.clip_ratio, ppo_mini_batch_size=rows, rollout_n=1,
        ppo_micro_batch_size_per_gpu=rows, use_dynamic_bsz=False, loss_agg_mode=settings.loss_agg_mode,
    )  # fmt: skip
    config.global_batch_info.update(global_batch or {})
    return config


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    settings: LossSettings,
    ref_logprobs: torch.Tensor | None = None,
    global_batch: dict[str, float] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip loss with TIS weights (and a KL penalty when kl_coef > 0), plus its metrics.

    All tensors are (rows, length-1) in `TrainingBatch`'s shifted layout. `global_batch`
    (verl's `dp_size`, `batch_num_tokens`, `global_batch_size`) normalises a micro-batch's
    loss by the whole batch across data-parallel ranks, so summed micro-batch gradients
    equal the full batch's; without it the loss is this batch's own mean.
    """
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights
    from verl.utils import torch_functional as verl_F

    mask = response_mask
    weights, is_metrics = compute_rollout_correction_weights(
        log_ratio=(old_logprobs - rollout_logprobs) * mask, response_mask=mask,
        rollout_is="token", rollout_is_threshold=settings.tis_cap,
    )  # fmt: skip
    config = _actor_config(settings, int(mask.shape[0]), global_batch)
    loss_fn = core_algos.get_policy_loss_fn("vanilla")
    loss, pg_metrics = loss_fn(
        old_log_prob=old_logprobs, log_prob=logprobs, advantages=advantages, response_mask=mask,
        loss_agg_mode=settings.loss_agg_mode, config=config, rollout_is_weights=weights,
    )  # fmt: skip
    metrics = {
        "policy_loss": float(loss.detach()),
        "clip_fraction": pg_metrics["actor/pg_clipfrac"],
        "ppo_kl": pg_metrics["actor/ppo_kl"],
        "tis_weight_mean": float(is_metrics.get("rollout_is_mean", float("nan"))),
        "rollout_logprob_diff": float(
            verl_F.masked_mean((old_logprobs - rollout_logprobs).abs(), mask)
        ),
    }
    if ref_logprobs is not None and settings.kl_coef > 0:
        # verl annotates torch.FloatTensor, the legacy CPU float type, where any float tensor works.
        kl = core_algos.kl_penalty(logprobs, ref_logprobs, "low_var_kl")  # type: ignore[arg-type]
        kl_loss = core_algos.agg_loss(
            loss_mat=kl,
            loss_mask=mask,
            loss_agg_mode=settings.loss_agg_mode,
            **config.global_batch_info,
        )
        loss = loss + settings.kl_coef * kl_loss
        metrics["kl"] = float(kl_loss.detach())
    return loss, metrics

import numpy as np
import torch

from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.policy_loss import (
    LossSettings,
    SignalWeights,
    compute_advantages,
    policy_loss,
    teacher_kl,
)

SETTINGS = LossSettings(clip_ratio=0.2, tis_cap=2.0, kl_coef=0.0, loss_agg_mode="token-mean")


def batch_of(rewards, groups, rollout_logprobs=None) -> TrainingBatch:
    size, length = len(rewards), 4
    mask = torch.ones(size, length - 1)
    token_rewards = torch.zeros(size, length - 1)
    token_rewards[:, -1] = torch.tensor(rewards)
    rollout = (
        rollout_logprobs if rollout_logprobs is not None else torch.full((size, length - 1), -1.0)
    )
    return TrainingBatch(
        input_ids=torch.ones(size, length, dtype=torch.long), attention_mask=torch.ones(size, length, dtype=torch.long),
        response_mask=mask, rollout_logprobs=rollout, token_rewards=token_rewards,
        group_index=np.array(groups, dtype=object), rewards=np.array(rewards), policy_versions=np.zeros(size, dtype=np.int64),
    )  # fmt: skip


def test_grpo_advantages_are_relative_within_each_group() -> None:
    batch = batch_of([1.0, 0.0, 5.0, 5.0, 3.0], ["a", "a", "b", "b", "b"])
    advantages = compute_advantages(batch, "grpo")
    assert advantages[0, 0] > 0 > advantages[1, 0]
    # A group's better answer is better only relative to its own group.
    assert advantages[2, 0] > 0 and advantages[4, 0] < 0


def tokens_of(batch: TrainingBatch) -> tuple[torch.Tensor, torch.Tensor]:
    return batch.response_mask, batch.rollout_logprobs


def test_rloo_and_reinforce_plus_plus_are_available() -> None:
    batch = batch_of([1.0, 0.0, 1.0, 0.0], ["a", "a", "b", "b"])
    for name in ("rloo", "reinforce_plus_plus"):
        advantages = compute_advantages(batch, name)
        assert advantages[0, 0] > advantages[1, 0]


def test_gradient_raises_the_logprob_of_positive_advantage_tokens() -> None:
    batch = batch_of([1.0, 0.0], ["a", "a"])
    logprobs = torch.full((2, 3), -1.0, requires_grad=True)
    loss, metrics = policy_loss(
        logprobs, logprobs.detach(), compute_advantages(batch, "grpo"), *tokens_of(batch), SETTINGS
    )
    loss.backward()
    assert logprobs.grad is not None
    assert (logprobs.grad[0] < 0).all() and (logprobs.grad[1] > 0).all()
    assert metrics["clip_fraction"] == 0.0


def test_truncated_importance_weights_cap_stale_tokens() -> None:
    # The trainer assigns e^2 times the rollout's probability: the weight is capped at tis_cap.
    batch = batch_of([1.0, 0.0], ["a", "a"], rollout_logprobs=torch.full((2, 3), -3.0))
    logprobs = torch.full((2, 3), -1.0, requires_grad=True)
    fresh = batch_of([1.0, 0.0], ["a", "a"])
    advantages = compute_advantages(batch, "grpo")
    capped, metrics = policy_loss(
        logprobs, logprobs.detach(), advantages, *tokens_of(batch), SETTINGS
    )
    uncorrected, _ = policy_loss(
        logprobs, logprobs.detach(), advantages, *tokens_of(fresh), SETTINGS
    )
    assert metrics["tis_weight_mean"] == SETTINGS.tis_cap
    assert torch.isclose(capped, uncorrected * SETTINGS.tis_cap)


def test_kl_penalty_is_added_against_the_reference() -> None:
    batch = batch_of([1.0, 0.0], ["a", "a"])
    logprobs = torch.full((2, 3), -1.0)
    settings = LossSettings(0.2, 2.0, 0.5, "token-mean")
    advantages = compute_advantages(batch, "grpo")
    loss, metrics = policy_loss(
        logprobs, logprobs, advantages, *tokens_of(batch), settings, logprobs - 0.5
    )
    assert metrics["kl"] > 0
    assert torch.isclose(loss, torch.tensor(metrics["policy_loss"] + 0.5 * metrics["kl"]))


def test_global_batch_info_normalises_a_micro_batch_by_the_whole_batch() -> None:
    # Two micro-batches of one row each, normalised by the batch's 6 tokens, add up to the full batch's loss.
    batch = batch_of([1.0, 0.0], ["a", "a"])
    logprobs = torch.full((2, 3), -1.0)
    advantages = torch.tensor([[1.0, 1.0, 1.0], [0.5, 0.5, 0.5]])
    whole, _ = policy_loss(logprobs, logprobs, advantages, *tokens_of(batch), SETTINGS)
    shares = [
        policy_loss(
            logprobs[rows], logprobs[rows], advantages[rows], batch.response_mask[rows], batch.rollout_logprobs[rows],
            SETTINGS, global_batch={"dp_size": 1, "batch_num_tokens": 6, "global_batch_size": 2},
        )[0]
        for rows in (slice(0, 1), slice(1, 2))
    ]  # fmt: skip
    assert torch.isclose(shares[0] + shares[1], whole)
    assert not torch.isclose(shares[0], whole)


def test_a_teacher_adds_its_logprob_minus_the_students_to_each_sampled_token() -> None:
    batch = batch_of([1.0, 0.0], ["a", "a"])
    batch.response_mask[1, 0] = 0.0  # a tool result's token: no signal of any kind
    batch.teacher_logprobs = (
        torch.tensor([[-0.5, -1.0, -3.0], [-2.0, -0.2, -1.0]]) * batch.response_mask
    )
    rewarded = compute_advantages(batch, "grpo")
    both = compute_advantages(batch, "grpo", SignalWeights(reward=1.0, teacher=0.5))
    gap = batch.teacher_logprobs - batch.rollout_logprobs
    assert torch.allclose(both, (rewarded + 0.5 * gap) * batch.response_mask)
    alone = compute_advantages(batch, "grpo", SignalWeights(reward=0.0, teacher=1.0))
    assert torch.allclose(alone, gap * batch.response_mask)
    assert alone[1, 0] == 0.0 and alone[0, 0] == 0.5 and alone[0, 2] == -2.0
    # The sampled reverse KL: student minus teacher, over sampled tokens only.
    expected = float(
        ((batch.rollout_logprobs - batch.teacher_logprobs) * batch.response_mask).sum() / 5
    )
    assert abs(teacher_kl(batch) - expected) < 1e-6


def test_without_teacher_scores_the_teacher_weight_changes_nothing() -> None:
    batch = batch_of([1.0, 0.0, 3.0], ["a", "a", "a"])
    assert torch.equal(
        compute_advantages(batch, "grpo", SignalWeights(teacher=1.0)),
        compute_advantages(batch, "grpo"),
    )

"""A small rewarded training batch, for the trainer's unit and integration tests alike."""

from __future__ import annotations

import numpy as np
import torch

from parity.services.trainer.batch_tensors import TrainingBatch


def rewarded_batch(good: int, bad: int) -> TrainingBatch:
    """Four rollouts of one prompt: two answered `good`, two `bad`; the good ones are rewarded."""
    prompt = [1, 2, 3, 4]
    ids = torch.tensor(
        [prompt + [good] * 3, prompt + [good] * 3, prompt + [bad] * 3, prompt + [bad] * 3]
    )
    mask = torch.zeros(4, 6)
    mask[:, 3:] = 1
    token_rewards = torch.zeros(4, 6)
    token_rewards[:2, -1] = 1.0
    return TrainingBatch(
        input_ids=ids, attention_mask=torch.ones_like(ids), response_mask=mask,
        rollout_logprobs=torch.full((4, 6), -6.9) * mask, token_rewards=token_rewards,
        group_index=np.array(["t"] * 4, dtype=object), rewards=np.array([1.0, 1.0, 0.0, 0.0]),
        policy_versions=np.zeros(4, dtype=np.int64),
    )  # fmt: skip

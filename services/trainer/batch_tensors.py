"""Assembled samples as padded tensors, the one batch format every backend trains on.

Token arrays are shifted by one: position t holds token t+1 and whether the loss
applies to it, so the model's logits at t score exactly the tokens that were sampled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from parity.api.common.v1 import sample_pb2
from parity.core import tokens
from parity.services.runtime.errors import InvalidArgument


@dataclass
class TrainingBatch:
    input_ids: torch.Tensor
    """(batch, length) prompt and completion ids, right-padded with 0."""
    attention_mask: torch.Tensor
    """(batch, length) 1 on real tokens."""
    response_mask: torch.Tensor
    """(batch, length-1) 1 where the next token was sampled by the policy."""
    rollout_logprobs: torch.Tensor
    """(batch, length-1) logprob of the next token at generation time; 0 off the mask."""
    token_rewards: torch.Tensor
    """(batch, length-1) the sample's return on its last sampled token: verl's outcome-reward layout."""
    group_index: np.ndarray
    """(batch,) group id of each sample, for group-relative advantages."""
    rewards: np.ndarray
    """(batch,) each sample's return, for metrics."""
    policy_versions: np.ndarray
    """(batch,) oldest policy version of each sample's sampled tokens."""
    teacher_logprobs: torch.Tensor | None = None
    """(batch, length-1) a distillation teacher's logprob of the next token; 0 off the mask. None without a teacher."""

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def token_count(self) -> int:
        return int(self.attention_mask.sum())

    def rows(self, index: torch.Tensor) -> TrainingBatch:
        picked = index.numpy()
        return TrainingBatch(
            self.input_ids[index], self.attention_mask[index], self.response_mask[index],
            self.rollout_logprobs[index], self.token_rewards[index], self.group_index[picked],
            self.rewards[picked], self.policy_versions[picked],
            None if self.teacher_logprobs is None else self.teacher_logprobs[index],
        )  # fmt: skip

    def with_teacher(self, scores: Sequence[np.ndarray]) -> TrainingBatch:
        """This batch with a teacher's logprobs, one array per sample aligned to its token ids, shifted
        like the rest and kept on sampled tokens only: tool results, users' turns and template tokens get none."""
        if len(scores) != self.size:
            raise InvalidArgument(
                f"the teacher scored {len(scores)} samples of a batch of {self.size}"
            )
        lengths = self.attention_mask.sum(dim=1)
        teacher = torch.zeros_like(self.rollout_logprobs)
        for row, values in enumerate(scores):
            n = int(lengths[row])
            if len(values) != n or not np.isfinite(values[1:]).all():
                raise InvalidArgument(
                    f"the teacher's scores of sample {row} are {len(values)} values for {n} tokens, or not finite"
                )
            teacher[row, : n - 1] = torch.from_numpy(np.asarray(values[1:], dtype=np.float32))
        return dataclasses.replace(self, teacher_logprobs=teacher * self.response_mask)


def sample_return(sample: sample_pb2.Sample) -> float:
    """The trajectory reward plus the sample's step rewards: what outcome estimators compare in a group."""
    return (
        float(sample.reward) + float(tokens.unpack_floats(sample.token_rewards).sum())
        if sample.token_rewards
        else float(sample.reward)
    )


def to_training_batch(samples: Sequence[sample_pb2.Sample]) -> TrainingBatch:
    """Pad and shift the samples; refuses samples whose arrays disagree or that have nothing to learn from."""
    if not samples:
        raise InvalidArgument("a training batch needs at least one sample")
    decoded = []
    for sample in samples:
        ids = tokens.unpack_token_ids(sample.token_ids)
        mask = tokens.unpack_mask(sample.loss_mask)
        logprobs = tokens.unpack_floats(sample.rollout_logprobs)
        if not len(ids) == len(mask) == len(logprobs) or len(ids) < 2:
            raise InvalidArgument(
                f"sample {sample.sample_id}: {len(ids)} tokens, {len(mask)} mask entries, {len(logprobs)} logprobs"
            )
        if not mask[1:].any():
            raise InvalidArgument(f"sample {sample.sample_id} has no sampled token to train on")
        decoded.append((ids, mask, logprobs))
    length = max(len(ids) for ids, _, _ in decoded)
    size = len(samples)
    input_ids = torch.zeros(size, length, dtype=torch.long)
    attention = torch.zeros(size, length, dtype=torch.long)
    response = torch.zeros(size, length - 1, dtype=torch.float32)
    rollout = torch.zeros(size, length - 1, dtype=torch.float32)
    rewards = torch.zeros(size, length - 1, dtype=torch.float32)
    returns = np.array([sample_return(s) for s in samples], dtype=np.float64)
    for row, (ids, mask, logprobs) in enumerate(decoded):
        n = len(ids)
        input_ids[row, :n] = torch.from_numpy(ids.astype(np.int64))
        attention[row, :n] = 1
        response[row, : n - 1] = torch.from_numpy(mask[1:].astype(np.float32))
        rollout[row, : n - 1] = torch.from_numpy(logprobs[1:].astype(np.float32))
        last_sampled = int(np.flatnonzero(mask[1:])[-1])
        rewards[row, last_sampled] = float(returns[row])
    return TrainingBatch(
        input_ids=input_ids,
        attention_mask=attention,
        response_mask=response,
        rollout_logprobs=rollout * response,
        token_rewards=rewards,
        group_index=np.array(
            [s.advantage_group or s.group_id or s.episode_id or s.sample_id for s in samples],
            dtype=object,
        ),
        rewards=returns,
        policy_versions=np.array([s.policy_version for s in samples], dtype=np.int64),
    )

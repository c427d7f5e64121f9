"""A trajectory's training samples: prefix-merged token sequences with their rewards.

How rewards become token-level rewards:
- `Sample.reward` is the trajectory reward (the sum of its trajectory-level rewards),
  the same on every sample of the trajectory. Outcome-reward estimators (GRPO, RLOO)
  compute the trajectory's advantage from it, group-relative, and apply it to every
  token whose loss mask is 1.
- A reward the agent gave one thread (`Reward.thread_id`, a subagent's outcome) adds to
  `Sample.reward` on that thread's samples only.
- `Sample.token_rewards` holds the step rewards: each step's reward sits on the last
  token that step sampled, 0 everywhere else. A trainer that wants one dense reward
  per token adds `Sample.reward` at the last sampled token of the trajectory's final
  sample (`parity.final_sample` is "true" in its metadata), so the trajectory reward
  is counted once however many samples a split produced.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from parity.api.common.v1 import llm_call_pb2, sample_pb2
from parity.core.tokens import head_tokens, token_span
from parity.services.assembler.prefix_merge import (
    DEFAULT_MAX_OPEN_THREADS,
    ChoiceTokens,
    MergedSequence,
    StepEnd,
    StepTokens,
    merge_steps,
)
from parity.services.assembler.trajectories import Trajectory

OVERLONG_POLICIES = ("truncate", "drop")
_FINAL = {"parity.final_sample": "true"}
_NOT_FINAL = {"parity.final_sample": "false"}
_USABLE_OUTCOMES = (llm_call_pb2.CALL_OUTCOME_UNSPECIFIED, llm_call_pb2.CALL_OUTCOME_SUCCEEDED)


@dataclass(frozen=True, slots=True)
class LengthLimit:
    # Tokens a sample may hold; 0 means no limit.
    max_tokens: int = 0
    # "truncate": keep the first max_tokens tokens; "drop": drop the sample.
    overlong: str = "truncate"


@dataclass(slots=True)
class TrajectorySamples:
    samples: list[sample_pb2.Sample]
    merged_calls: int = 0
    splits: int = 0
    split_reasons: Counter[str] = field(default_factory=Counter)
    # Tokens trained more than once: what a split's new sample shares with the one before.
    repeated_tokens: int = 0
    # The trajectory's threads (conversations), and those ended at the open-thread limit.
    threads: int = 0
    threads_ended_at_limit: int = 0
    # Per thread: tokens in its samples, and how many of them a split repeated.
    thread_tokens: Counter[int] = field(default_factory=Counter)
    thread_repeated_tokens: Counter[int] = field(default_factory=Counter)
    truncated: int = 0
    # Samples dropped for length: over the limit with overlong="drop", or with no
    # sampled token left after truncation.
    dropped_overlong: int = 0
    # Calls that cannot be trained on: external models, failed upstream calls, no tokens.
    unusable_calls: int = 0


def trainable_steps(trajectory: Trajectory) -> tuple[list[StepTokens], int]:
    """The calls a policy sampled and that produced tokens, and how many others were skipped."""
    steps = []
    for index, call in enumerate(trajectory.calls):
        choices = tuple(ChoiceTokens(c.token_ids, c.logprobs) for c in call.choices if c.token_ids)
        if (
            call.kind == llm_call_pb2.CALL_KIND_EXTERNAL
            or call.outcome not in _USABLE_OUTCOMES
            or not choices
        ):
            continue
        steps.append(StepTokens(call.call_id, index, call.prompt_token_ids, choices, call.policy_version,
                                call.thread_id))  # fmt: skip
    return steps, len(trajectory.calls) - len(steps)


def build_samples(
    trajectory: Trajectory, episode_id: str, group_id: str, limit: LengthLimit,
    max_open_threads: int = DEFAULT_MAX_OPEN_THREADS,
) -> TrajectorySamples:  # fmt: skip
    """The trajectory's samples; `max_open_threads` bounds the sequences (threads, forks) kept open while its calls
    are merged: past it the least recently extended one ends (`threads_ended_at_limit`)."""
    steps, unusable = trainable_steps(trajectory)
    merged = merge_steps(steps, max_open_threads)
    result = TrajectorySamples([], merged.merged_calls, merged.splits, merged.split_reasons, merged.repeated_tokens,
                               merged.threads, merged.threads_ended_at_limit,
                               thread_repeated_tokens=merged.repeated_by_thread, unusable_calls=unusable)  # fmt: skip
    kept: list[tuple[MergedSequence, bool]] = []
    for sequence in merged.sequences:
        truncated = False
        if limit.max_tokens and sequence.token_count > limit.max_tokens:
            if limit.overlong == "drop" or sequence.prompt_length >= limit.max_tokens:
                result.dropped_overlong += 1
                continue
            sequence, truncated = _truncate(sequence, limit.max_tokens), True
            result.truncated += 1
        kept.append((sequence, truncated))
        result.thread_tokens[sequence.thread_index] += sequence.token_count
    history_modes = {call.call_id: call.history_mode for call in trajectory.calls}
    end_user_id = next((call.end_user_id for call in trajectory.calls if call.end_user_id), "")
    for position, (sequence, truncated) in enumerate(kept):
        sample = sample_pb2.Sample(
            sample_id=_sample_id(trajectory.session_id, trajectory.name, position),
            session_id=trajectory.session_id,
            trajectory_name=trajectory.name,
            episode_id=episode_id,
            group_id=group_id,
            token_ids=sequence.token_ids,
            loss_mask=sequence.loss_mask,
            rollout_logprobs=sequence.logprobs,
            reward=trajectory.reward + trajectory.thread_rewards.get(sequence.thread_id, 0.0),
            token_rewards=_token_rewards(sequence, trajectory.step_rewards),
            policy_version=sequence.policy_version,
            prompt_length=sequence.prompt_length,
            call_ids=sequence.call_ids,
            truncated=truncated,
            metadata=_FINAL if position == len(kept) - 1 else _NOT_FINAL,
            history_mode=history_mode(
                history_modes.get(sequence.call_ids[0], llm_call_pb2.HISTORY_MODE_UNSPECIFIED)
            ),
            end_user_id=end_user_id,
            thread_index=sequence.thread_index,
            thread_id=sequence.thread_id,
        )
        result.samples.append(sample)
    return result


def history_mode(recorded: llm_call_pb2.HistoryMode) -> llm_call_pb2.HistoryMode:
    """A call's history mode, with calls recorded before there were modes read as as_deployed."""
    return recorded or llm_call_pb2.HISTORY_MODE_AS_DEPLOYED


def unique_token_count(token_count: int, repeated_tokens: int) -> int:
    """The tokens of samples counted once, whatever splits repeated (truncation may have cut repeats too)."""
    return max(token_count - repeated_tokens, 0)


def _truncate(sequence: MergedSequence, max_tokens: int) -> MergedSequence:
    """The first max_tokens tokens; a step whose last sampled token is cut loses its reward."""
    return MergedSequence(
        token_ids=head_tokens(sequence.token_ids, max_tokens),
        loss_mask=sequence.loss_mask[:max_tokens],
        logprobs=head_tokens(sequence.logprobs, max_tokens),
        steps=[
            s if s.last_token < max_tokens else StepEnd(s.step_index, s.call_id, -1)
            for s in sequence.steps
        ],
        prompt_length=sequence.prompt_length,
        policy_version=sequence.policy_version,
        thread_index=sequence.thread_index,
        thread_id=sequence.thread_id,
    )


def _token_rewards(sequence: MergedSequence, step_rewards: dict[int, float]) -> bytes:
    placed = [(s.last_token, step_rewards[s.step_index]) for s in sequence.steps
              if s.last_token >= 0 and s.step_index in step_rewards]  # fmt: skip
    if not placed:
        return bytes(token_span(len(sequence.loss_mask)))
    rewards = np.zeros(len(sequence.loss_mask), dtype="<f4")
    for position, value in placed:
        rewards[position] += value
    return rewards.tobytes()


def _sample_id(session_id: str, trajectory_name: str, position: int) -> str:
    """Stable across rebuilds (a redelivered batch carries the same ids) and unambiguous
    whatever characters the session and trajectory names hold."""
    digest = hashlib.blake2b(
        f"{len(session_id)}:{session_id}{trajectory_name}".encode(), digest_size=10
    )
    return f"{digest.hexdigest()}-{position}"

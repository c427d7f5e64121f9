"""Batches and the per-consumer ledger of what was delivered and acknowledged.

The ledger lives in the store: before a batch is sent, every rollout in it is marked
`parity.batch = {consumer, sequence, acknowledged: false, ...}` in one transaction;
an acknowledgement rewrites the marks with `acknowledged: true`. A restarted
assembler reads the marks back from the closes it replays, so it knows which batches
to redeliver (same id, same groups, samples rebuilt from the same rows) and which
never to send again, and numbers the next batch after the highest it finds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from parity.api.common.v1 import sample_pb2
from parity.services.assembler.filters import Staleness
from parity.services.assembler.group_builder import BuildStats
from parity.services.assembler.rollouts import Rollout
from parity.services.assembler.samples import unique_token_count
from parity.services.assembler.session_marks import BatchMark, batch_id


@dataclass(slots=True)
class BatchStats:
    sample_count: int = 0
    group_count: int = 0
    merged_call_count: int = 0
    split_count: int = 0
    split_reasons: dict[str, int] = field(default_factory=dict)
    token_count: int = 0
    unique_token_count: int = 0
    loss_token_fraction: float = 0.0
    truncated_count: int = 0
    filtered_counts: dict[str, int] = field(default_factory=dict)
    reward_mean: float = 0.0
    reward_std: float = 0.0
    capped_episode_count: int = 0
    thread_count: int = 0
    threads_per_session: float = 0.0
    max_thread_repetition: float = 1.0
    threads_ended_at_limit: int = 0


@dataclass(slots=True)
class Batch:
    batch_id: str
    sequence: int
    samples: list[sample_pb2.Sample]
    group_ids: list[str]
    stats: BatchStats
    redelivered: bool = False
    # Groups dropped whole since the consumer's previous batch; counted in stats.filtered_counts.
    dropped_group_ids: list[str] = field(default_factory=list)


@dataclass(slots=True)
class BatchPlan:
    """What a delivered batch holds, enough to rebuild it exactly."""

    consumer_id: str
    sequence: int
    # In batch order; each group's rollouts in close order.
    groups: list[tuple[str, list[Rollout]]]
    policy_version: int | None
    max_policy_lag: int | None

    @property
    def batch_id(self) -> str:
        return batch_id(self.consumer_id, self.sequence)

    @property
    def staleness(self) -> Staleness | None:
        if self.policy_version is None or self.max_policy_lag is None:
            return None
        return Staleness(self.policy_version, self.max_policy_lag)

    def mark(self, acknowledged: bool) -> BatchMark:
        return BatchMark(
            self.consumer_id, self.sequence, acknowledged, self.policy_version, self.max_policy_lag
        )

    @property
    def rollouts(self) -> list[Rollout]:
        return [rollout for _, rollouts in self.groups for rollout in rollouts]

    def serves(self, run_id: str) -> bool:
        """Whether a subscription for `run_id` may be given this batch: one for no run takes any, one for a run
        only a batch of its own groups and groups of no run."""
        return not run_id or all(rollout.run_id in ("", run_id) for rollout in self.rollouts)


@dataclass(slots=True)
class ConsumerLedger:
    consumer_id: str
    # Highest sequence delivered to the consumer (acknowledged or not).
    last_sequence: int = 0
    unacknowledged: dict[int, BatchPlan] = field(default_factory=dict)
    acknowledged: set[int] = field(default_factory=set)
    # Groups dropped whole by a formation that ended short of a batch, and their counts: they go
    # into the next batch formed, so its stats show every drop since the one before.
    dropped: Counter[str] = field(default_factory=Counter)
    dropped_group_ids: list[str] = field(default_factory=list)

    def record(self, mark: BatchMark, group_id: str, rollout: Rollout) -> None:
        """Take one rollout's mark, read back from the store, into the ledger."""
        self.last_sequence = max(self.last_sequence, mark.sequence)
        if mark.acknowledged:
            self.acknowledged.add(mark.sequence)
            return
        plan = self.unacknowledged.get(mark.sequence)
        if plan is None:
            plan = self.unacknowledged[mark.sequence] = BatchPlan(
                self.consumer_id, mark.sequence, [], mark.policy_version, mark.max_policy_lag
            )
        for planned_group, rollouts in plan.groups:
            if planned_group == group_id:
                rollouts.append(rollout)
                return
        plan.groups.append((group_id, [rollout]))


class ConsumerLedgers:
    """Every consumer's ledger: rebuilt from batch marks as closes replay, kept up as batches form and are
    acknowledged."""

    def __init__(self) -> None:
        self._ledgers: dict[str, ConsumerLedger] = {}

    def of(self, consumer_id: str) -> ConsumerLedger:
        ledger = self._ledgers.get(consumer_id)
        if ledger is None:
            ledger = self._ledgers[consumer_id] = ConsumerLedger(consumer_id)
        return ledger


def summarize(
    samples: Sequence[sample_pb2.Sample],
    group_count: int,
    built: BuildStats,
    filtered: Counter[str],
) -> BatchStats:
    token_count = sum(len(s.loss_mask) for s in samples)
    loss_tokens = sum(s.loss_mask.count(1) for s in samples)
    rewards = [s.reward for s in samples]
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    return BatchStats(
        sample_count=len(samples),
        group_count=group_count,
        merged_call_count=built.merged_calls,
        split_count=built.splits,
        split_reasons=dict(built.split_reasons),
        token_count=token_count,
        unique_token_count=unique_token_count(token_count, built.repeated_tokens),
        loss_token_fraction=loss_tokens / token_count if token_count else 0.0,
        truncated_count=built.truncated,
        filtered_counts=dict(+(built.filtered + filtered)),
        reward_mean=mean,
        reward_std=math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        if rewards
        else 0.0,
        capped_episode_count=built.capped_episodes,
        thread_count=built.threads,
        threads_per_session=built.threads / sessions
        if (sessions := len({s.session_id for s in samples}))
        else 0.0,
        max_thread_repetition=built.max_thread_repetition,
        threads_ended_at_limit=built.threads_ended_at_limit,
    )

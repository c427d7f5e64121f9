"""Batches: formed from ready groups, redelivered until acknowledged, each exactly once.

A batch's samples are built from the store when the batch is formed, and again, from
the same rows, when it is redelivered. Its mark is written on every rollout in it
before the batch is returned, and its acknowledgement before the ack is answered, so
a restart's replay rebuilds the same ledgers.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import structlog

from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.services.assembler import session_marks
from parity.services.assembler.batches import Batch, BatchPlan, ConsumerLedgers, summarize
from parity.services.assembler.filters import Staleness
from parity.services.assembler.group_builder import BuildStats, GroupBuild, build_group
from parity.services.assembler.rollout_tracker import RolloutTracker
from parity.services.assembler.rollouts import Rollout
from parity.services.assembler.session_marks import BatchMark
from parity.services.runtime.errors import InvalidArgument

log = structlog.get_logger(__name__)


class BatchFormer:
    def __init__(self, tracker: RolloutTracker, ledgers: ConsumerLedgers) -> None:
        self.tracker = tracker
        self.ledgers = ledgers
        self.settings = tracker.settings
        self.stats = tracker.stats
        self._formation = asyncio.Lock()
        # Runs whose next batch may be short: their driver has no more rollouts coming for the step.
        self._released: set[str] = set()

    def release(self, run_id: str) -> int:
        """Let `run_id`'s next batch form from as few as one ready group; returns the run's pending groups."""
        self._released.add(run_id)
        self.tracker.changes.notify()
        log.info("batch_released", run_id=run_id)
        return self.tracker.pending_group_count(run_id)

    def staleness(self, max_policy_lag: int | None, policy_version: int | None) -> Staleness | None:
        """The staleness filter for a consumer at `policy_version`; None when it has no version or no lag applies."""
        lag = self.settings.max_policy_lag if max_policy_lag is None else max_policy_lag
        if policy_version is None or lag is None:
            return None
        return Staleness(policy_version, lag)

    def unacknowledged(self, consumer_id: str, sequence: int) -> BatchPlan | None:
        return self.ledgers.of(consumer_id).unacknowledged.get(sequence)

    async def form_batch(
        self, consumer_id: str, groups_per_batch: int, run_id: str, staleness: Staleness | None
    ) -> Batch | None:  # fmt: skip
        """A new batch for `consumer_id`, durably marked before it is returned; None while fewer groups than it
        asks for are ready (than one, once its run was released)."""
        wanted = groups_per_batch
        tracker = self.tracker
        async with self._formation:
            # A release holds for this one formation, formed or not: the next step's batch waits for its full size.
            released = run_id in self._released
            self._released.discard(run_id)
            least = 1 if released else wanted
            # Twice what is wanted, so groups a filter drops can be replaced in one pass.
            ready = tracker.ready_groups(2 * wanted, run_id)
            if len(ready) < least:
                return None
            ledger = self.ledgers.of(consumer_id)
            chosen: list[GroupBuild] = []
            dropped = ledger.dropped
            drop_marks: list[store_pb.SessionMetadataUpdate] = []
            while ready and len(chosen) < wanted:
                part, ready = ready[: wanted - len(chosen)], ready[wanted - len(chosen) :]
                contents = await self._read([r for g in part for r in g.trainable()])
                for group in part:
                    build = build_group(group.group_id, group.trainable(), contents, self.settings.filters,
                                        staleness, group_filters=True)  # fmt: skip
                    if not build.dropped:
                        chosen.append(build)
                        continue
                    self.stats.count_filtered(
                        run_id or group.run_id, build.stats.filtered + Counter({build.dropped: 1})
                    )
                    dropped.update(build.stats.filtered)
                    dropped[build.dropped] += 1
                    ledger.dropped_group_ids.append(group.group_id)
                    for rollout in group.trainable():
                        rollout.filtered = build.dropped
                        drop_marks.append(store_pb.SessionMetadataUpdate(
                            session_id=rollout.session_id, metadata={session_marks.FILTERED: build.dropped}))  # fmt: skip
                    tracker.settle(group)
            await tracker.write_marks(drop_marks)
            if len(chosen) < least:
                return None
            plan = BatchPlan(
                consumer_id, ledger.last_sequence + 1, [(b.group_id, b.rollouts) for b in chosen],
                staleness.policy_version if staleness else None, staleness.max_lag if staleness else None,
            )  # fmt: skip
            mark = plan.mark(acknowledged=False)
            await tracker.write_marks(_batch_marks(plan, mark))
            ledger.last_sequence = plan.sequence
            ledger.unacknowledged[plan.sequence] = plan
            for build in chosen:
                tracker.settle(tracker.groups[build.group_id])
                for rollout in build.rollouts:
                    rollout.batch = mark
            batch = _batch(plan, chosen, dropped, redelivered=False)
            batch.dropped_group_ids = ledger.dropped_group_ids
            ledger.dropped, ledger.dropped_group_ids = Counter(), []
            for build in chosen:
                self.stats.count_filtered(
                    run_id or tracker.groups[build.group_id].run_id, build.stats.filtered
                )
            self.stats.delivered_batches += 1
            self.stats.delivered_samples += len(batch.samples)
            log.info("batch_formed", batch_id=batch.batch_id, groups=len(chosen), samples=len(batch.samples),
                     short=len(chosen) < wanted)  # fmt: skip
            return batch

    async def rebuild_batch(self, plan: BatchPlan) -> Batch:
        """An unacknowledged batch again, from the same rows, for redelivery."""
        contents = await self._read(plan.rollouts)
        builds = [
            build_group(
                group_id,
                rollouts,
                contents,
                self.settings.filters,
                plan.staleness,
                group_filters=False,
            )
            for group_id, rollouts in plan.groups
        ]
        log.info("batch_redelivered", batch_id=plan.batch_id)
        return _batch(plan, builds, Counter(), redelivered=True)

    async def acknowledge(self, consumer_id: str, batch_id: str) -> int:
        """Record the trainer's acknowledgement; returns the batch's sequence. Acknowledging
        twice is a no-op."""
        ledger = self.ledgers.of(consumer_id)
        plan = next((p for p in ledger.unacknowledged.values() if p.batch_id == batch_id), None)
        if plan is None:
            for sequence in ledger.acknowledged:
                if session_marks.batch_id(consumer_id, sequence) == batch_id:
                    return sequence
            raise InvalidArgument(
                f"batch {batch_id!r} was never delivered to consumer {consumer_id!r}"
            )
        mark = plan.mark(acknowledged=True)
        await self.tracker.write_marks(_batch_marks(plan, mark))
        if ledger.unacknowledged.pop(plan.sequence, None) is not None:
            ledger.acknowledged.add(plan.sequence)
            self.stats.acknowledged_batches += 1
        for rollout in plan.rollouts:
            rollout.batch = mark
        return plan.sequence

    async def _read(self, rollouts: Sequence[Rollout]) -> dict[str, store_pb.SessionContents]:
        return await self.tracker.store.read_sessions(
            [r.session_id for r in rollouts],
            tokens_only=True,
            call_counts={r.session_id: r.call_count for r in rollouts},
        )


def _batch(
    plan: BatchPlan, builds: list[GroupBuild], dropped: Counter[str], *, redelivered: bool
) -> Batch:
    built = BuildStats()
    for build in builds:
        built.add(build.stats)
    samples = [sample for build in builds for sample in build.samples]
    stats = summarize(samples, len(builds), built, dropped)
    return Batch(
        plan.batch_id, plan.sequence, samples, [b.group_id for b in builds], stats, redelivered
    )


def _batch_marks(plan: BatchPlan, mark: BatchMark) -> list[store_pb.SessionMetadataUpdate]:
    metadata = {session_marks.BATCH: mark.encode()}
    return [
        store_pb.SessionMetadataUpdate(session_id=r.session_id, metadata=metadata)
        for r in plan.rollouts
    ]

"""The assembler: follows the store's closes, groups rollouts, scores them, and builds and
delivers batches exactly once.

Its memory holds one small record per closed session (`Rollout`), never tokens: a
batch's samples are built from the store when the batch is formed, and again, from
the same rows, when it is redelivered. Everything it decides for good is written
into session metadata first (`session_marks`), so a restart replays the closes from
the beginning and arrives at the same state. Run one assembler per store.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog

from parity.api.common.v1 import reward_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.ids import new_id
from parity.services.assembler import session_marks
from parity.services.assembler.batch_feed import BatchFeed, Subscription
from parity.services.assembler.batches import Batch, BatchPlan, ConsumerLedger, summarize
from parity.services.assembler.filters import FilterSettings, Staleness
from parity.services.assembler.group_builder import BuildStats, GroupBuild, build_group
from parity.services.assembler.rollouts import Group, Rollout, rollout_from_session
from parity.services.assembler.scoring import Scorer, ScoringError, reward_id, score_trajectory
from parity.services.assembler.session_marks import BatchMark
from parity.services.assembler.store_client import StoreClient
from parity.services.assembler.trajectories import split_trajectories
from parity.services.runtime.errors import InvalidArgument, NotFound, ParityError

log = structlog.get_logger(__name__)

WATCH_PAGE = 1000
# Group-level filters: a rollout carrying one makes its group settled on replay.
GROUP_FILTERS = ("zero_variance_group", "empty_group")
MAX_ID_LENGTH = 256
_SCORE_BATCH = 64
_MAX_METADATA_UPDATES = 10_000
_MAX_WAIT_S = 5.0


@dataclass(frozen=True)
class AssemblySettings:
    # Episodes per group when CloseSession does not say; 0 relies on the idle release.
    group_size: int = 0
    # A group short of its size is released this long after its last rollout joined.
    group_idle_s: float = 30.0
    filters: FilterSettings = field(default_factory=FilterSettings)
    # For subscriptions that set no max_policy_lag; None disables the staleness filter.
    max_policy_lag: int | None = None


@dataclass
class AssemblerStats:
    closed_sessions: int = 0
    validation_sessions: int = 0
    delivered_batches: int = 0
    acknowledged_batches: int = 0
    delivered_samples: int = 0
    filtered: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)


class Assembler:
    def __init__(self, store: StoreClient, settings: AssemblySettings, scorers: Sequence[Scorer] = ()) -> None:
        self.store = store
        self.settings = settings
        self.scorers = list(scorers)
        self.stats = AssemblerStats()
        self.rollouts: dict[str, Rollout] = {}
        # Every rollout in close order, for listing.
        self.closed: list[Rollout] = []
        self.groups: dict[str, Group] = {}
        # Groups neither batched nor dropped, in the order their first rollout closed.
        self._pending: dict[str, Group] = {}
        self._ledgers: dict[str, ConsumerLedger] = {}
        self._feeds: dict[str, BatchFeed] = {}
        # Sessions whose CloseSession is writing its engine reward; not batchable yet.
        self._closing: set[str] = set()
        self._to_score: asyncio.Queue[Rollout] = asyncio.Queue()
        self._formation = asyncio.Lock()
        self._caught_up = asyncio.Event()
        self.changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # Error marks being written; kept referenced until they finish.
        self._mark_writes: set[asyncio.Task[None]] = set()

    # Lifecycle.
    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._follow_closes(), name="assembler-closes"))
        if self.scorers:
            self._tasks.append(asyncio.create_task(self._score_loop(), name="assembler-scoring"))

    async def stop(self) -> None:
        await asyncio.gather(*self._mark_writes, return_exceptions=True)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.store.close()

    def notify(self) -> None:
        """Wake every feed waiting for data or credit."""
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait(self, changed: asyncio.Event) -> None:
        """Until `changed` fires or the next idle group is due for release."""
        now = time.monotonic()
        # Only groups still short of their idle release need a timer; a ready group changes with a close or a score,
        # which notify, and a ready group of another run must not turn this into a busy loop.
        due = min((at for g in self._pending.values() if (at := g.ready_at(self.settings.group_idle_s)) > now),
                  default=now + _MAX_WAIT_S)  # fmt: skip
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout=min(max(due - now, 0.01), _MAX_WAIT_S))

    # Following the store.
    async def _follow_closes(self) -> None:
        async for sessions, _ in self.store.watch_closed_sessions():
            for session in sessions:
                self._on_closed(session)
            if not self._caught_up.is_set() and len(sessions) < WATCH_PAGE:
                log.info("closes_replayed", rollouts=len(self.closed), pending_groups=len(self._pending))
                self._caught_up.set()
            if sessions:
                self.notify()

    def _on_closed(self, session: session_pb2.Session) -> None:
        if session.session_id in self.rollouts:
            return
        rollout = rollout_from_session(session)
        rollout.close_seq = len(self.closed) + 1
        self.rollouts[rollout.session_id] = rollout
        self.closed.append(rollout)
        self.stats.closed_sessions += 1
        if rollout.validation:
            self.stats.validation_sessions += 1
            self._queue_scoring(rollout)
            return
        group = self.groups.get(rollout.group_id)
        if group is None:
            group = self.groups[rollout.group_id] = self._pending[rollout.group_id] = Group(rollout.group_id)
        if rollout.batch is not None:
            self.ledger(rollout.batch.consumer_id).record(rollout.batch, group.group_id, rollout)
            self._settle(group)
        elif rollout.filtered in GROUP_FILTERS:
            self._settle(group)
        elif rollout.filtered == "malformed_metadata" and session_marks.FILTERED not in session.metadata:
            self._record_error(rollout, rollout.filtered, rollout.error)
        elif not rollout.filtered and group.settled:
            rollout.filtered = "late_rollout"
            self.stats.filtered["late_rollout"] += 1
            log.info("late_rollout", session_id=rollout.session_id, group_id=group.group_id)
        group.rollouts.append(rollout)
        group.last_join = time.monotonic()
        self._queue_scoring(rollout)

    def _queue_scoring(self, rollout: Rollout) -> None:
        skip_scoring = rollout.failed and self.settings.filters.drop_failed_rollouts
        if self.scorers and not rollout.filtered and rollout.batch is None and not skip_scoring:
            self._to_score.put_nowait(rollout)
        else:
            rollout.scored = True

    def _settle(self, group: Group) -> None:
        group.settled = True
        self._pending.pop(group.group_id, None)

    def _record_error(self, rollout: Rollout, kind: str, message: str) -> None:
        """Bad input: counted, logged, and written on the rollout so a restart knows."""
        rollout.filtered, rollout.error = kind, message
        self.stats.errors[kind] += 1
        self.stats.filtered[kind] += 1
        log.warning("rollout_refused", session_id=rollout.session_id, kind=kind, error=message)
        update = store_pb.SessionMetadataUpdate(
            session_id=rollout.session_id, metadata={session_marks.FILTERED: kind, session_marks.ERROR: message[:2000]}
        )
        task = asyncio.create_task(self._write_error_mark(update), name="assembler-error-mark")
        self._mark_writes.add(task)
        task.add_done_callback(self._mark_writes.discard)

    async def _write_error_mark(self, update: store_pb.SessionMetadataUpdate) -> None:
        try:
            await self._write_marks([update])
        except ParityError as error:
            # Not durable then: a restart finds the same bad input and records it again.
            log.warning("error_mark_not_written", session_id=update.session_id, error=str(error))

    async def _write_marks(self, updates: list[store_pb.SessionMetadataUpdate]) -> None:
        for start in range(0, len(updates), _MAX_METADATA_UPDATES):
            await self.store.update_metadata(updates[start : start + _MAX_METADATA_UPDATES])

    # Scoring.
    async def _score_loop(self) -> None:
        while True:
            batch = [await self._to_score.get()]
            while not self._to_score.empty() and len(batch) < _SCORE_BATCH:
                batch.append(self._to_score.get_nowait())
            try:
                await self._score(batch)
            except ParityError as error:
                log.warning("scoring_deferred", rollouts=len(batch), error=str(error))
                await asyncio.sleep(1.0)
                for rollout in batch:
                    self._to_score.put_nowait(rollout)
            else:
                self.notify()

    async def _score(self, rollouts: list[Rollout]) -> None:
        contents = await self.store.read_sessions(
            [r.session_id for r in rollouts], call_counts={r.session_id: r.call_count for r in rollouts}
        )
        rewards: list[reward_pb2.Reward] = []

        async def score(rollout: Rollout) -> None:
            session = contents.get(rollout.session_id)
            if session is None:
                return
            existing = {r.reward_id for r in session.rewards}
            trajectories, _ = split_trajectories(rollout.session_id, session.calls, session.rewards)
            try:
                for trajectory in trajectories:
                    rewards.extend(await score_trajectory(self.scorers, trajectory, rollout.task_metadata, existing))
            except ScoringError as error:
                self._record_error(rollout, error.kind, f"session {rollout.session_id!r}: {error}")

        await asyncio.gather(*(score(r) for r in rollouts))
        for start in range(0, len(rewards), 1000):
            await self.store.write_rewards(rewards[start : start + 1000])
        for rollout in rollouts:
            rollout.scored = True

    # Writes from the SDK and the agent engine.
    async def report_reward(self, reward: reward_pb2.Reward) -> str:
        # The store checks these too, but its refusal would name its own request's field.
        problem = _reported_reward_problem(reward)
        if problem:
            self.stats.errors["invalid_reward"] += 1
            raise InvalidArgument(problem)
        if not reward.reward_id:
            # Assigned here, so the store's retries and ours write it once.
            reward.reward_id = new_id()
        reward.source = reward.source or "sdk"
        rollout = self.rollouts.get(reward.session_id)
        if rollout is not None and (rollout.batch is not None or rollout.filtered):
            self.stats.errors["late_reward"] += 1
            log.info("late_reward", session_id=reward.session_id, reward_id=reward.reward_id)
        try:
            await self.store.write_rewards([reward])
        except NotFound:
            self.stats.errors["unknown_session"] += 1
            log.warning("reward_refused", session_id=reward.session_id, reason="unknown session or call")
            raise
        except InvalidArgument:
            self.stats.errors["invalid_reward"] += 1
            raise
        return reward.reward_id

    async def close_session(
        self, session_id: str, outcome: int, error_message: str, *, reward: float | None, group_id: str,
        episode_id: str, group_size: int, validation: bool = False, run_id: str = "",
    ) -> session_pb2.Session:  # fmt: skip
        for name, value in (("session_id", session_id), ("group_id", group_id), ("episode_id", episode_id),
                            ("run_id", run_id)):  # fmt: skip
            if len(value) > MAX_ID_LENGTH:
                raise InvalidArgument(f"{name} is {len(value)} characters; at most {MAX_ID_LENGTH} are allowed")
        if not session_id:
            raise InvalidArgument("session_id is required")
        if group_size < 0:
            raise InvalidArgument(f"group_size must not be negative, got {group_size}")
        if outcome not in session_pb2.SessionOutcome.values():
            raise InvalidArgument(f"outcome {outcome} is not a SessionOutcome")
        # Checked before the close: refused after it, the session would be closed with no reward.
        if reward is not None and not math.isfinite(reward):
            raise InvalidArgument(f"reward must be a finite number, got {reward}")
        metadata = {session_marks.EPISODE_ID: episode_id or session_id}
        if group_id:
            metadata[session_marks.GROUP_ID] = group_id
        if group_size:
            metadata[session_marks.GROUP_SIZE] = str(group_size)
        if validation:
            metadata[session_marks.VALIDATION] = "true"
        if run_id:
            metadata[session_marks.RUN_ID] = run_id
        self._closing.add(session_id)
        try:
            session = await self.store.close_session(session_id, outcome, error_message, metadata)
            if reward is not None:
                await self.store.write_rewards([reward_pb2.Reward(
                    reward_id=reward_id("engine", session_id, ""), session_id=session_id,
                    level=reward_pb2.REWARD_LEVEL_TRAJECTORY, value=reward, source="engine",
                )])  # fmt: skip
        finally:
            self._closing.discard(session_id)
            self.notify()
        return session

    # Batches.
    def ledger(self, consumer_id: str) -> ConsumerLedger:
        ledger = self._ledgers.get(consumer_id)
        if ledger is None:
            ledger = self._ledgers[consumer_id] = ConsumerLedger(consumer_id)
        return ledger

    async def subscribe(self, subscription: Subscription) -> BatchFeed:
        # The ledger is complete only once every close has been replayed.
        await self._caught_up.wait()
        previous = self._feeds.get(subscription.consumer_id)
        if previous is not None:
            previous.supersede()
        redeliver = sorted(self.ledger(subscription.consumer_id).unacknowledged)
        feed = self._feeds[subscription.consumer_id] = BatchFeed(self, subscription, redeliver)
        log.info("subscribed", consumer_id=subscription.consumer_id, redeliver=len(redeliver))
        return feed

    def release(self, feed: BatchFeed) -> None:
        if self._feeds.get(feed.consumer_id) is feed:
            del self._feeds[feed.consumer_id]

    def _staleness(self, feed: BatchFeed) -> Staleness | None:
        lag = feed.subscription.max_policy_lag
        lag = self.settings.max_policy_lag if lag is None else lag
        if feed.policy_version is None or lag is None:
            return None
        return Staleness(feed.policy_version, lag)

    def _ready_groups(self, limit: int, run_id: str) -> list[Group]:
        """Up to `limit` groups ready to batch, oldest first; with `run_id`, that run's and those of no run."""
        now, settings = time.monotonic(), self.settings
        ready = []
        for group in self._pending.values():
            if run_id and group.run_id not in ("", run_id):
                continue
            if group.is_ready(now, settings.group_size, settings.group_idle_s) and all(
                r.scored and r.session_id not in self._closing for r in group.rollouts
            ):
                ready.append(group)
                if len(ready) == limit:
                    break
        return ready

    async def form_batch(self, feed: BatchFeed) -> Batch | None:
        """A new batch for the feed's consumer, durably marked before it is returned; None
        while fewer groups than it asks for are ready."""
        wanted = feed.subscription.groups_per_batch
        async with self._formation:
            # Twice what is wanted, so groups a filter drops can be replaced in one pass.
            ready = self._ready_groups(2 * wanted, feed.subscription.run_id)
            if len(ready) < wanted:
                return None
            staleness = self._staleness(feed)
            ledger = self.ledger(feed.consumer_id)
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
                    self.stats.filtered.update(build.stats.filtered)
                    self.stats.filtered[build.dropped] += 1
                    dropped.update(build.stats.filtered)
                    dropped[build.dropped] += 1
                    ledger.dropped_group_ids.append(group.group_id)
                    for rollout in group.trainable():
                        rollout.filtered = build.dropped
                        drop_marks.append(store_pb.SessionMetadataUpdate(
                            session_id=rollout.session_id, metadata={session_marks.FILTERED: build.dropped}))  # fmt: skip
                    self._settle(group)
            await self._write_marks(drop_marks)
            if len(chosen) < wanted:
                return None
            plan = BatchPlan(
                feed.consumer_id, ledger.last_sequence + 1, [(b.group_id, b.rollouts) for b in chosen],
                staleness.policy_version if staleness else None, staleness.max_lag if staleness else None,
            )  # fmt: skip
            mark = plan.mark(acknowledged=False)
            await self._write_marks(_batch_marks(plan, mark))
            ledger.last_sequence = plan.sequence
            ledger.unacknowledged[plan.sequence] = plan
            for build in chosen:
                self._settle(self.groups[build.group_id])
                for rollout in build.rollouts:
                    rollout.batch = mark
            batch = self._batch(plan, chosen, dropped, redelivered=False)
            batch.dropped_group_ids = ledger.dropped_group_ids
            ledger.dropped, ledger.dropped_group_ids = Counter(), []
            for build in chosen:
                self.stats.filtered.update(build.stats.filtered)
            self.stats.delivered_batches += 1
            self.stats.delivered_samples += len(batch.samples)
            log.info("batch_formed", batch_id=batch.batch_id, groups=len(chosen), samples=len(batch.samples))
            return batch

    async def rebuild_batch(self, plan: BatchPlan) -> Batch:
        """An unacknowledged batch again, from the same rows, for redelivery."""
        contents = await self._read(plan.rollouts)
        builds = [
            build_group(group_id, rollouts, contents, self.settings.filters, plan.staleness, group_filters=False)
            for group_id, rollouts in plan.groups
        ]
        log.info("batch_redelivered", batch_id=plan.batch_id)
        return self._batch(plan, builds, Counter(), redelivered=True)

    async def _read(self, rollouts: Sequence[Rollout]) -> dict[str, store_pb.SessionContents]:
        return await self.store.read_sessions(
            [r.session_id for r in rollouts], tokens_only=True, call_counts={r.session_id: r.call_count for r in rollouts}
        )

    @staticmethod
    def _batch(plan: BatchPlan, builds: list[GroupBuild], dropped: Counter[str], *, redelivered: bool) -> Batch:
        built = BuildStats()
        for build in builds:
            built.add(build.stats)
        samples = [sample for build in builds for sample in build.samples]
        stats = summarize(samples, len(builds), built, dropped)
        return Batch(plan.batch_id, plan.sequence, samples, [b.group_id for b in builds], stats, redelivered)

    async def acknowledge(self, consumer_id: str, batch_id: str) -> int:
        """Record the trainer's acknowledgement; returns the batch's sequence. Acknowledging
        twice is a no-op."""
        ledger = self.ledger(consumer_id)
        plan = next((p for p in ledger.unacknowledged.values() if p.batch_id == batch_id), None)
        if plan is None:
            for sequence in ledger.acknowledged:
                if session_marks.batch_id(consumer_id, sequence) == batch_id:
                    return sequence
            raise InvalidArgument(f"batch {batch_id!r} was never delivered to consumer {consumer_id!r}")
        mark = plan.mark(acknowledged=True)
        await self._write_marks(_batch_marks(plan, mark))
        if ledger.unacknowledged.pop(plan.sequence, None) is not None:
            ledger.acknowledged.add(plan.sequence)
            self.stats.acknowledged_batches += 1
        for rollout in plan.rollouts:
            rollout.batch = mark
        return plan.sequence

    def pending_group_count(self, run_id: str = "") -> int:
        """Groups neither batched nor dropped; with `run_id`, that run's and those of no run."""
        if not run_id:
            return len(self._pending)
        return sum(group.run_id in ("", run_id) for group in self._pending.values())


def _batch_marks(plan: BatchPlan, mark: BatchMark) -> list[store_pb.SessionMetadataUpdate]:
    metadata = {session_marks.BATCH: mark.encode()}
    return [store_pb.SessionMetadataUpdate(session_id=r.session_id, metadata=metadata) for r in plan.rollouts]


def _reported_reward_problem(reward: reward_pb2.Reward) -> str:
    """What makes a ReportReward's reward unusable for training, or "" if nothing does."""
    if not reward.session_id:
        return "reward.session_id is required"
    if not math.isfinite(reward.value):
        return f"reward.value must be a finite number, got {reward.value}"
    return ""

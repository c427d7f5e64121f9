"""Rollouts as the store closes them: groups, scoring, readiness, and the SDK's closes and rewards.

Its memory holds one small record per closed session (`Rollout`), never tokens.
Everything it decides for good is written into session metadata first
(`session_marks`), so a restart replays the closes from the beginning and arrives at
the same state; batch marks met on the way rebuild the consumers' ledgers.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from parity.api.common.v1 import reward_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.core.ids import new_id
from parity.services.assembler import session_marks
from parity.services.assembler.batches import ConsumerLedgers
from parity.services.assembler.changes import Changes
from parity.services.assembler.filters import FilterSettings
from parity.services.assembler.rollouts import Group, Rollout, rollout_from_session
from parity.services.assembler.scoring import Scorer, ScoringError, reward_id, score_trajectory
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
    # `filtered` again, per run ("" for rollouts of no run): concurrent runs each read their own.
    filtered_by_run: dict[str, Counter[str]] = field(default_factory=dict)

    def count_filtered(self, run_id: str, counts: Mapping[str, int]) -> None:
        self.filtered.update(counts)
        self.filtered_by_run.setdefault(run_id, Counter()).update(counts)

    def filtered_of(self, run_id: str) -> Counter[str]:
        """What was dropped for `run_id`; every run's, with none named."""
        return self.filtered_by_run.get(run_id, Counter()) if run_id else self.filtered


class RolloutTracker:
    def __init__(
        self, store: StoreClient, settings: AssemblySettings, scorers: Sequence[Scorer], stats: AssemblerStats,
        ledgers: ConsumerLedgers,
    ) -> None:  # fmt: skip
        self.store = store
        self.settings = settings
        self.scorers = list(scorers)
        self.stats = stats
        self.ledgers = ledgers
        self.changes = Changes(self._next_idle_release)
        self.rollouts: dict[str, Rollout] = {}
        # Every rollout in close order, for listing.
        self.closed: list[Rollout] = []
        self.groups: dict[str, Group] = {}
        self.caught_up = asyncio.Event()
        """Set once every close stored before the start has been replayed: the ledgers are complete."""
        # Groups neither batched nor dropped, in the order their first rollout closed.
        self._pending: dict[str, Group] = {}
        # Sessions whose CloseSession is writing its engine reward; not batchable yet.
        self._closing: set[str] = set()
        self._to_score: asyncio.Queue[Rollout] = asyncio.Queue()
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

    # Readiness.
    def ready_groups(self, limit: int, run_id: str) -> list[Group]:
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

    def settle(self, group: Group) -> None:
        """The group is batched or dropped for good: no longer pending."""
        group.settled = True
        self._pending.pop(group.group_id, None)

    def pending_group_count(self, run_id: str = "") -> int:
        """Groups neither batched nor dropped; with `run_id`, that run's and those of no run."""
        if not run_id:
            return len(self._pending)
        return sum(group.run_id in ("", run_id) for group in self._pending.values())

    def _next_idle_release(self) -> float | None:
        # Only groups still short of their idle release need a timer; a ready group changes with a close or a score,
        # which notify, and a ready group of another run must not turn waiting into a busy loop.
        now = time.monotonic()
        return min((at for g in self._pending.values() if (at := g.ready_at(self.settings.group_idle_s)) > now),
                   default=None)  # fmt: skip

    async def write_marks(self, updates: list[store_pb.SessionMetadataUpdate]) -> None:
        for start in range(0, len(updates), _MAX_METADATA_UPDATES):
            await self.store.update_metadata(updates[start : start + _MAX_METADATA_UPDATES])

    # Following the store.
    async def _follow_closes(self) -> None:
        async for sessions, _ in self.store.watch_closed_sessions():
            for session in sessions:
                self._on_closed(session)
            if not self.caught_up.is_set() and len(sessions) < WATCH_PAGE:
                log.info(
                    "closes_replayed", rollouts=len(self.closed), pending_groups=len(self._pending)
                )
                self.caught_up.set()
            if sessions:
                self.changes.notify()

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
            group = self.groups[rollout.group_id] = self._pending[rollout.group_id] = Group(
                rollout.group_id
            )
        if rollout.batch is not None:
            self.ledgers.of(rollout.batch.consumer_id).record(
                rollout.batch, group.group_id, rollout
            )
            self.settle(group)
        elif rollout.filtered in GROUP_FILTERS:
            self.settle(group)
        elif (
            rollout.filtered == "malformed_metadata"
            and session_marks.FILTERED not in session.metadata
        ):
            self._record_error(rollout, rollout.filtered, rollout.error)
        elif group.settled and rollout.failed and self.settings.filters.drop_failed_rollouts:
            # A retried attempt, closed after the attempt that settled its episode: never trainable, not late.
            self.stats.count_filtered(rollout.run_id, {"failed_rollout": 1})
        elif not rollout.filtered and group.settled:
            rollout.filtered = "late_rollout"
            self.stats.count_filtered(rollout.run_id, {"late_rollout": 1})
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

    def _record_error(self, rollout: Rollout, kind: str, message: str) -> None:
        """Bad input: counted, logged, and written on the rollout so a restart knows."""
        rollout.filtered, rollout.error = kind, message
        self.stats.errors[kind] += 1
        self.stats.count_filtered(rollout.run_id, {kind: 1})
        log.warning("rollout_refused", session_id=rollout.session_id, kind=kind, error=message)
        update = store_pb.SessionMetadataUpdate(
            session_id=rollout.session_id,
            metadata={session_marks.FILTERED: kind, session_marks.ERROR: message[:2000]},
        )
        task = asyncio.create_task(self._write_error_mark(update), name="assembler-error-mark")
        self._mark_writes.add(task)
        task.add_done_callback(self._mark_writes.discard)

    async def _write_error_mark(self, update: store_pb.SessionMetadataUpdate) -> None:
        try:
            await self.write_marks([update])
        except ParityError as error:
            # Not durable then: a restart finds the same bad input and records it again.
            log.warning("error_mark_not_written", session_id=update.session_id, error=str(error))

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
                self.changes.notify()

    async def _score(self, rollouts: list[Rollout]) -> None:
        contents = await self.store.read_sessions(
            [r.session_id for r in rollouts],
            call_counts={r.session_id: r.call_count for r in rollouts},
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
                    rewards.extend(
                        await score_trajectory(
                            self.scorers, trajectory, rollout.task_metadata, existing
                        )
                    )
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
            log.warning(
                "reward_refused", session_id=reward.session_id, reason="unknown session or call"
            )
            raise
        except InvalidArgument:
            self.stats.errors["invalid_reward"] += 1
            raise
        return reward.reward_id

    async def close_session(
        self, session_id: str, outcome: session_pb2.SessionOutcome, error_message: str, *, reward: float | None, group_id: str,
        episode_id: str, group_size: int, validation: bool = False, run_id: str = "", capped_episodes: str = "drop",
        teacher_scored: bool = False, from_store: bool = False,
    ) -> session_pb2.Session:  # fmt: skip
        for name, value in (("session_id", session_id), ("group_id", group_id), ("episode_id", episode_id),
                            ("run_id", run_id)):  # fmt: skip
            if len(value) > MAX_ID_LENGTH:
                raise InvalidArgument(
                    f"{name} is {len(value)} characters; at most {MAX_ID_LENGTH} are allowed"
                )
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
        if capped_episodes != "drop":
            metadata[session_marks.CAPPED_EPISODES] = capped_episodes
        if teacher_scored:
            metadata[session_marks.TEACHER_SCORED] = "true"
        if from_store:
            if reward is None:
                raise InvalidArgument(
                    "from_store: a stored session is adopted with its reward by the run's feedback rule; set reward"
                )
            metadata[session_marks.FROM_STORE] = "true"
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
            self.changes.notify()
        return session


def _reported_reward_problem(reward: reward_pb2.Reward) -> str:
    """What makes a ReportReward's reward unusable for training, or "" if nothing does."""
    if not reward.session_id:
        return "reward.session_id is required"
    if not math.isfinite(reward.value):
        return f"reward.value must be a finite number, got {reward.value}"
    return ""

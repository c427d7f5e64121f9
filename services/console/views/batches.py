"""One step's batch: its groups, every rollout's reward, advantage and outcome, and what the
filters dropped.

The trainer says what the step trained on (`GetStepBatch`: samples, rewards, advantages,
filter counts, dropped groups); the assembler lists each group's rollouts, those no
sample came from included (failed, timed out, filtered), with their outcome. Without
the assembler the page still shows what the trainer knows, under a banner.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.assembler.v1 import trajectory_pb2
from parity.api.common.v1 import session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.services.console.upstream import Missing, ServiceDown, Services
from parity.services.console.views.format import enum_label

# What each filter drops, as the assembler names them (docs/assembler.md, Filters).
FILTERS = {
    "failed_rollout": "rollouts that failed, timed out or were cancelled",
    "unrewarded_trajectory": "trajectories no reward scores",
    "zero_variance_group": "groups whose returns are all equal: nothing to learn from",
    "overlong_sample": "samples over the length limit",
    "stale_sample": "samples too many policy versions behind",
    "empty_group": "groups left with no sample",
    "late_rollout": "rollouts that closed after their group was batched",
    "missing_session": "rollouts whose session the store no longer has",
}
_ROSTER_THREADS = 8


@dataclass
class RolloutRow:
    session_id: str
    trajectory_name: str
    outcome: str
    state: str
    filter_reason: str
    reward: float | None
    total_return: float | None = None
    advantage: float | None = None
    token_count: int | None = None
    loss_token_count: int | None = None
    policy_version: int | None = None
    truncated: bool = False
    trained: bool = False
    sample_count: int = 0
    # The mean of its samples' teacher gaps, on a distillation step.
    teacher_gap: float | None = None
    # Why the rollout failed, as its session recorded it.
    error: str = ""


@dataclass
class GroupView:
    group_id: str
    rollouts: list[RolloutRow]
    dropped_by: str = ""

    @property
    def rewards(self) -> list[float]:
        return [
            r.reward
            for r in self.rollouts
            if r.reward is not None and (r.trained or self.dropped_by)
        ]

    @property
    def reward_mean(self) -> float | None:
        return statistics.fmean(self.rewards) if self.rewards else None

    @property
    def reward_std(self) -> float | None:
        return statistics.pstdev(self.rewards) if self.rewards else None


@dataclass
class BatchPage:
    run_id: str
    step: int
    batch: trainer_pb.StepBatch
    groups: list[GroupView]
    dropped_groups: list[GroupView]
    filter_counts: list[tuple[str, int, str]]
    # The run's latest step, for the link to the next.
    last_step: int
    banners: list[str] = field(default_factory=list)

    @property
    def teacher(self) -> bool:
        """Whether a distillation teacher scored the step's samples."""
        return any(s.teacher_logprobs for s in self.batch.samples)

    @property
    def stats(self) -> list[tuple[str, str]]:
        s = self.batch.stats
        return [("samples", str(s.sample_count)), ("groups", str(s.group_count)), ("tokens", f"{s.token_count:,}"),
                ("loss tokens", f"{s.loss_token_fraction:.1%}"), ("merged calls", str(s.merged_call_count)),
                ("splits", str(s.split_count)), ("truncated", str(s.truncated_count)),
                ("reward", f"{s.reward_mean:.4g} ± {s.reward_std:.3g}")]  # fmt: skip


def batch_page(services: Services, run_id: str, step: int) -> BatchPage:
    trainer = services.trainer
    batch = trainer.read(
        trainer.client.get_step_batch, trainer_pb.GetStepBatchRequest(run_id=run_id, step=step)
    ).batch
    last_step = trainer.read(
        trainer.client.get_run, trainer_pb.GetRunRequest(run_id=run_id)
    ).run.step
    counts = [
        (name, int(count), FILTERS.get(name, ""))
        for name, count in sorted(batch.stats.filtered_counts.items())
    ]
    page = BatchPage(run_id, step, batch, [], [], counts, last_step)
    rosters, banner = _rosters(services, [*batch.group_ids, *batch.dropped_group_ids])
    if banner:
        page.banners.append(banner)
    trained: dict[tuple[str, str], list[trainer_pb.TrainedSample]] = {}
    for sample in batch.samples:
        trained.setdefault((sample.session_id, sample.trajectory_name), []).append(sample)
    for group_id in batch.group_ids:
        rows = [_row(t, trained) for t in rosters.get(group_id, [])]
        listed = {(r.session_id, r.trajectory_name) for r in rows}
        # Without the assembler's roster, the samples alone still say who was trained on.
        rows += [_sample_row(samples) for key, samples in trained.items()
                 if samples[0].group_id == group_id and key not in listed]  # fmt: skip
        page.groups.append(GroupView(group_id, _ordered(rows)))
    for group_id in batch.dropped_group_ids:
        rows = [_row(t, {}) for t in rosters.get(group_id, [])]
        reasons = {r.filter_reason for r in rows if r.filter_reason} - {"failed_rollout"}
        page.dropped_groups.append(
            GroupView(group_id, _ordered(rows), ", ".join(sorted(reasons)) or "dropped")
        )
    _add_errors(
        services, [r for g in page.groups + page.dropped_groups for r in g.rollouts], page.banners
    )
    return page


def _ordered(rows: list[RolloutRow]) -> list[RolloutRow]:
    """Trained rollouts first, the best rewarded on top: a group reads from what it learned most from."""
    return sorted(
        rows, key=lambda r: (not r.trained, -(r.reward if r.reward is not None else float("-inf")))
    )


def _add_errors(services: Services, rows: list[RolloutRow], banners: list[str]) -> None:
    """The error each failed rollout's session recorded: the first thing to read about a failure."""
    failed = {r.session_id: r for r in rows if r.outcome not in ("succeeded", "open", "")}
    if not failed:
        return
    store = services.store
    request = store_pb.BatchGetSessionsRequest(
        session_ids=list(failed), view=store_pb.CALL_VIEW_BASIC
    )
    try:
        found = store.read(store.client.batch_get_sessions, request)
    except ServiceDown as error:
        banners.append(f"{error}; the failed rollouts' errors are not shown")
        return
    for contents in found.sessions:
        failed[contents.session.session_id].error = contents.session.error_message


def _rosters(
    services: Services, group_ids: list[str]
) -> tuple[dict[str, list[trajectory_pb2.Trajectory]], str]:
    assembler = services.assembler

    def roster(group_id: str) -> list[trajectory_pb2.Trajectory]:
        request = assembler_pb.ListTrajectoriesRequest(group_id=group_id, page_size=1000)
        return assembler.read_all(assembler.client.list_trajectories, request, "trajectories")

    try:
        with ThreadPoolExecutor(_ROSTER_THREADS) as threads:
            return dict(zip(group_ids, threads.map(roster, group_ids), strict=True)), ""
    except (ServiceDown, Missing) as error:
        return {}, f"{error}; rollouts not trained on (failed, filtered) are not shown"


def _row(
    trajectory: trajectory_pb2.Trajectory,
    trained: dict[tuple[str, str], list[trainer_pb.TrainedSample]],
) -> RolloutRow:
    samples = trained.get((trajectory.session_id, trajectory.trajectory_name))
    row = RolloutRow(
        session_id=trajectory.session_id, trajectory_name=trajectory.trajectory_name,
        outcome=enum_label(session_pb2.SessionOutcome, trajectory.outcome, "SESSION_OUTCOME_") if trajectory.outcome else "open",
        state=enum_label(trajectory_pb2.TrajectoryState, trajectory.state, "TRAJECTORY_STATE_"),
        filter_reason=trajectory.filter_reason, reward=trajectory.reward if trajectory.has_reward else None,
    )  # fmt: skip
    if samples:
        _add_samples(row, samples)
    return row


def _sample_row(samples: list[trainer_pb.TrainedSample]) -> RolloutRow:
    row = RolloutRow(
        samples[0].session_id, samples[0].trajectory_name, "", "trained", "", samples[0].reward
    )
    _add_samples(row, samples)
    return row


def _add_samples(row: RolloutRow, samples: list[trainer_pb.TrainedSample]) -> None:
    """A trajectory split by a prefix break trains as several samples: their tokens add up,
    and each has its own return and advantage (step rewards differ); the row shows their mean."""
    row.trained = True
    row.total_return = statistics.fmean(s.total_return for s in samples)
    row.advantage = statistics.fmean(s.advantage for s in samples)
    row.token_count = sum(s.token_count for s in samples)
    row.loss_token_count = sum(s.loss_token_count for s in samples)
    row.policy_version = min(s.policy_version for s in samples)
    row.truncated = any(s.truncated for s in samples)
    row.sample_count = len(samples)
    scored = [s.teacher_gap for s in samples if s.teacher_logprobs]
    row.teacher_gap = statistics.fmean(scored) if scored else None

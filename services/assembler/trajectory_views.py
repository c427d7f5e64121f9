"""GetTrajectory and ListTrajectories: trajectories as the store records them, with the
state the assembler has them in.

Listing walks closed sessions in close order; a page token is a position (the
session's place in close order, and the trajectory's place within it). A session that
is still open is found by GetTrajectory, or by ListTrajectories filtered to its id.
"""

from __future__ import annotations

from dataclasses import dataclass

from parity.api.assembler.v1 import trajectory_pb2
from parity.api.common.v1 import sample_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.services.assembler.rollout_tracker import RolloutTracker
from parity.services.assembler.rollouts import Rollout
from parity.services.assembler.samples import TrajectorySamples, build_samples, unique_token_count
from parity.services.assembler.trajectories import Trajectory, split_trajectories
from parity.services.runtime import page_tokens
from parity.services.runtime.errors import InvalidArgument, NotFound

_TRAJECTORY_BITS = 20
_STATE = trajectory_pb2.TrajectoryState


@dataclass(slots=True)
class AssembledTrajectory:
    """One trajectory as the assembler holds it: its calls, its episode and group, its state here (and why it was
    filtered), its session's outcome, and the samples built from it. GetTrajectory and ListTrajectories answer
    with it (servicer.trajectory_to_proto)."""

    trajectory: Trajectory
    episode_id: str
    group_id: str
    state: trajectory_pb2.TrajectoryState
    filter_reason: str
    built: TrajectorySamples
    # Unspecified while the session is open.
    outcome: session_pb2.SessionOutcome
    with_samples: bool = False

    @property
    def samples(self) -> list[sample_pb2.Sample]:
        return self.built.samples if self.with_samples else []

    @property
    def split_count(self) -> int:
        return self.built.splits

    @property
    def merged_call_count(self) -> int:
        return self.built.merged_calls

    @property
    def split_reasons(self) -> dict[str, int]:
        return dict(self.built.split_reasons)

    @property
    def token_count(self) -> int:
        return sum(len(sample.loss_mask) for sample in self.built.samples)

    @property
    def unique_token_count(self) -> int:
        return unique_token_count(self.token_count, self.built.repeated_tokens)


def rollout_state(
    tracker: RolloutTracker, rollout: Rollout | None
) -> tuple[trajectory_pb2.TrajectoryState, str]:
    if rollout is None:
        return _STATE.TRAJECTORY_STATE_OPEN, ""
    if rollout.validation:
        return _STATE.TRAJECTORY_STATE_VALIDATION, ""
    if rollout.filtered:
        return _STATE.TRAJECTORY_STATE_FILTERED, rollout.error or rollout.filtered
    if rollout.batch is not None:
        return (
            _STATE.TRAJECTORY_STATE_TRAINED
            if rollout.batch.acknowledged
            else _STATE.TRAJECTORY_STATE_READY
        ), ""
    if rollout.failed and tracker.settings.filters.drop_failed_rollouts:
        return _STATE.TRAJECTORY_STATE_FILTERED, "failed_rollout"
    return _STATE.TRAJECTORY_STATE_PENDING, ""


def views_of(
    tracker: RolloutTracker, contents: store_pb.SessionContents, with_samples: bool
) -> list[AssembledTrajectory]:
    session = contents.session
    rollout = tracker.rollouts.get(session.session_id)
    if rollout is None and session.state == session_pb2.SESSION_STATE_CLOSED:
        # Closed, but the watch has not brought the close here yet.
        state, reason = _STATE.TRAJECTORY_STATE_PENDING, ""
    else:
        state, reason = rollout_state(tracker, rollout)
    episode = rollout.episode_id if rollout else session.session_id
    group = rollout.group_id if rollout else episode
    views = []
    trajectories, _ = split_trajectories(session.session_id, contents.calls, contents.rewards)
    for trajectory in trajectories:
        filters = tracker.settings.filters
        built = build_samples(trajectory, episode, group, filters.length, filters.max_open_threads)
        views.append(
            AssembledTrajectory(
                trajectory, episode, group, state, reason, built, session.outcome, with_samples
            )
        )
    return views


async def get_trajectory(
    tracker: RolloutTracker, session_id: str, name: str, with_samples: bool
) -> AssembledTrajectory:
    if not session_id:
        raise InvalidArgument("session_id is required")
    contents = (await tracker.store.read_sessions([session_id])).get(session_id)
    if contents is None:
        raise NotFound(f"session {session_id!r} does not exist")
    for view in views_of(tracker, contents, with_samples):
        if view.trajectory.name == name:
            return view
    raise NotFound(f"session {session_id!r} has no trajectory named {name!r}")


async def list_trajectories(
    tracker: RolloutTracker, *, session_id: str, group_id: str, state: int, page_size: int, page_token: str,
    with_samples: bool,
) -> tuple[list[AssembledTrajectory], str]:  # fmt: skip
    scope = f"trajectories:{session_id}:{group_id}:{state}"
    position = page_tokens.decode_page_token(page_token, scope)
    limit = page_tokens.page_size(page_size)
    start_rollout, skip = position >> _TRAJECTORY_BITS, position & ((1 << _TRAJECTORY_BITS) - 1)
    if session_id and session_id not in tracker.rollouts:
        # An open session (or an unknown one): only the store knows it.
        candidates: list[tuple[int, str]] = [(0, session_id)]
    else:
        candidates = [
            (index, r.session_id) for index, r in enumerate(tracker.closed[start_rollout:], start_rollout)
            if (not session_id or r.session_id == session_id) and (not group_id or r.group_id == group_id)
            and (not state or rollout_state(tracker, r)[0] == state)
        ]  # fmt: skip
    views: list[AssembledTrajectory] = []
    next_token = ""
    # Each session holds at least one trajectory, so `limit` sessions fill a page.
    window = candidates[: limit + 1]
    contents = await tracker.store.read_sessions([sid for _, sid in window])
    for index, sid in window:
        if sid not in contents:
            continue
        session_views = [
            v
            for v in views_of(tracker, contents[sid], with_samples)
            if not state or v.state == state
        ]
        offset = skip if index == start_rollout else 0
        for place, view in enumerate(session_views[offset:], offset):
            if len(views) == limit:
                next_token = page_tokens.encode_page_token(
                    scope, (index << _TRAJECTORY_BITS) | place
                )
                return views, next_token
            views.append(view)
    if len(candidates) > len(window):
        index = candidates[len(window)][0]
        next_token = page_tokens.encode_page_token(scope, index << _TRAJECTORY_BITS)
    return views, next_token

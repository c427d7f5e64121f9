"""One group's samples, built from the store's record of its rollouts, with every filter
applied and counted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from parity.api.common.v1 import llm_call_pb2, reward_pb2, sample_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.core.feedback_rule import is_feedback
from parity.core.group_returns import has_no_variance
from parity.services.assembler.filters import FilterSettings, Staleness
from parity.services.assembler.rollouts import Rollout
from parity.services.assembler.samples import TrajectorySamples, build_samples
from parity.services.assembler.trajectories import split_trajectories

_SESSION_CAPPED = llm_call_pb2.CALL_OUTCOME_SESSION_CAPPED


@dataclass(slots=True)
class BuildStats:
    merged_calls: int = 0
    splits: int = 0
    split_reasons: Counter[str] = field(default_factory=Counter)
    repeated_tokens: int = 0
    # Threads of the built trajectories, those ended at the open-thread limit, and the most any one thread's
    # samples repeated of its tokens (tokens in its samples ÷ its unique tokens).
    threads: int = 0
    threads_ended_at_limit: int = 0
    max_thread_repetition: float = 1.0
    truncated: int = 0
    unusable_calls: int = 0
    # Rewards that scored no trajectory or step.
    unplaced_rewards: int = 0
    # Episodes trained on although ingest refused one of their calls past a session cap.
    capped_episodes: int = 0
    filtered: Counter[str] = field(default_factory=Counter)

    def add(self, other: BuildStats) -> None:
        self.merged_calls += other.merged_calls
        self.splits += other.splits
        self.split_reasons.update(other.split_reasons)
        self.repeated_tokens += other.repeated_tokens
        self.threads += other.threads
        self.threads_ended_at_limit += other.threads_ended_at_limit
        self.max_thread_repetition = max(self.max_thread_repetition, other.max_thread_repetition)
        self.truncated += other.truncated
        self.unusable_calls += other.unusable_calls
        self.unplaced_rewards += other.unplaced_rewards
        self.capped_episodes += other.capped_episodes
        self.filtered.update(other.filtered)


@dataclass(slots=True)
class GroupBuild:
    group_id: str
    # The rollouts that may be trained on (those not filtered before the build).
    rollouts: list[Rollout]
    samples: list[sample_pb2.Sample] = field(default_factory=list)
    stats: BuildStats = field(default_factory=BuildStats)
    # Set when the whole group is dropped: the filter's name.
    dropped: str = ""


def build_group(
    group_id: str,
    rollouts: Sequence[Rollout],
    contents: Mapping[str, store_pb.SessionContents],
    settings: FilterSettings,
    staleness: Staleness | None,
    *,
    group_filters: bool,
) -> GroupBuild:
    """Samples of the group's trainable rollouts. With `group_filters`, a group with no
    sample, or with no reward variance and no teacher, comes back `dropped`; without (a redelivery), the
    group is rebuilt as it was first delivered, whatever it holds."""
    build = GroupBuild(group_id, [])
    stats = build.stats
    returns: list[float] = []
    for rollout in rollouts:
        session = contents.get(rollout.session_id)
        calls: Sequence[llm_call_pb2.LlmCall] = session.calls if session is not None else ()
        rewards: Sequence[reward_pb2.Reward] = session.rewards if session is not None else ()
        capped = any(call.outcome == _SESSION_CAPPED for call in calls)
        if capped:
            # The refused call has nothing to train on; the episode ends at the call before it.
            calls = [call for call in calls if call.outcome != _SESSION_CAPPED]
            if rollout.capped_episodes == "drop":
                stats.filtered["capped_episode"] += 1
                continue
        zeroed = capped and rollout.capped_episodes == "zero_reward"
        if rollout.failed and settings.drop_failed_rollouts and not zeroed:
            stats.filtered["failed_rollout"] += 1
            continue
        if session is None:
            stats.filtered["missing_session"] += 1
            continue
        if zeroed:
            rewards = _zero_rewards(rollout.session_id, calls)
        elif rollout.from_store:
            rewards = [reward for reward in rewards if not is_feedback(reward)]
        stats.capped_episodes += capped
        build.rollouts.append(rollout)
        trajectories, unplaced = split_trajectories(rollout.session_id, calls, rewards)
        stats.unplaced_rewards += unplaced
        for trajectory in trajectories:
            stats.unplaced_rewards += trajectory.unplaced_step_rewards
            # A teacher-scored trajectory has a signal on every sampled token: unrewarded, it trains with return 0.
            if settings.drop_unrewarded and not trajectory.rewarded and not rollout.teacher_scored:
                stats.filtered["unrewarded_trajectory"] += 1
                continue
            built = build_samples(
                trajectory, rollout.episode_id, group_id, settings.length, settings.max_open_threads
            )
            stats.merged_calls += built.merged_calls
            stats.splits += built.splits
            stats.split_reasons.update(built.split_reasons)
            stats.repeated_tokens += built.repeated_tokens
            stats.threads += built.threads
            stats.threads_ended_at_limit += built.threads_ended_at_limit
            stats.max_thread_repetition = max(stats.max_thread_repetition, thread_repetition(built))
            if settings.thread_advantage == "role":
                for sample in built.samples:
                    if sample.thread_id:
                        sample.advantage_group = f"{group_id}/{sample.thread_id}"
            stats.truncated += built.truncated
            stats.unusable_calls += built.unusable_calls
            stats.filtered["overlong_sample"] += built.dropped_overlong
            fresh = [
                s
                for s in built.samples
                if staleness is None or not staleness.is_stale(s.policy_version)
            ]
            stats.filtered["stale_sample"] += len(built.samples) - len(fresh)
            if fresh:
                build.samples += fresh
                returns.append(trajectory.total_return)
    stats.filtered = +stats.filtered
    if group_filters:
        if not build.samples:
            build.dropped = "empty_group"
        elif (
            settings.drop_zero_variance_groups
            and has_no_variance(returns)
            and not _teacher_scored(build.rollouts)
        ):
            build.dropped = "zero_variance_group"
    return build


def thread_repetition(built: TrajectorySamples) -> float:
    """The most any one thread of the trajectory trained of its tokens: tokens in its samples ÷ unique ones."""
    ratios = [tokens / max(tokens - built.thread_repeated_tokens[thread], 1)
              for thread, tokens in built.thread_tokens.items() if tokens]  # fmt: skip
    return max(ratios, default=1.0)


def _teacher_scored(rollouts: Sequence[Rollout]) -> bool:
    """Equal returns leave a teacher-scored group its per-token signal: it is kept."""
    return any(rollout.teacher_scored for rollout in rollouts)


def _zero_rewards(
    session_id: str, calls: Sequence[llm_call_pb2.LlmCall]
) -> list[reward_pb2.Reward]:
    """Reward 0 for each of the session's trajectories, in place of what the agent reported."""
    return [
        reward_pb2.Reward(reward_id=f"capped-{session_id}-{name}", session_id=session_id, trajectory_name=name,
                          level=reward_pb2.REWARD_LEVEL_TRAJECTORY, value=0.0, source="capped_episodes")
        for name in sorted({call.trajectory_name for call in calls})
    ]  # fmt: skip

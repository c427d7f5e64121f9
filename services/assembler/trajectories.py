"""A session's calls and rewards, as trajectories: the calls under one trajectory name,
with the trajectory- and step-level rewards that score them.

Which trajectory a reward scores:
- a named reward scores the trajectory of that name;
- an unnamed one scores the session's unnamed trajectory, or, when the session has
  none, every trajectory of the session (an outcome of the whole episode);
- a step reward naming a call scores the trajectory that holds the call, whatever
  name it carries; one naming a step index scores that step of the trajectory above.

A trajectory's reward is the sum of its trajectory-level rewards, one per source
usually (SDK, engine, reward function, judge); a step's reward is the sum of its
step rewards. A trajectory-level reward naming a thread (`Reward.thread_id`, a
subagent's outcome) is kept apart, per thread: it scores that thread's samples only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from parity.api.common.v1 import llm_call_pb2, reward_pb2

_STEP = reward_pb2.REWARD_LEVEL_STEP


@dataclass(slots=True)
class Trajectory:
    session_id: str
    name: str
    # Every call under the name, in commit order; a step's index is its position here.
    calls: list[llm_call_pb2.LlmCall]
    rewards: list[reward_pb2.Reward] = field(default_factory=list)
    reward: float = 0.0
    has_reward: bool = False
    step_rewards: dict[int, float] = field(default_factory=dict)
    # Trajectory-level rewards that named a thread, summed per thread.
    thread_rewards: dict[str, float] = field(default_factory=dict)
    # Step rewards that name a step the trajectory does not have.
    unplaced_step_rewards: int = 0

    @property
    def total_return(self) -> float:
        """The trajectory reward plus every step and thread reward: what group variance is judged on."""
        return self.reward + sum(self.step_rewards.values()) + sum(self.thread_rewards.values())

    @property
    def rewarded(self) -> bool:
        return self.has_reward or bool(self.step_rewards)


def split_trajectories(
    session_id: str, calls: Sequence[llm_call_pb2.LlmCall], rewards: Sequence[reward_pb2.Reward]
) -> tuple[list[Trajectory], int]:
    """The session's trajectories, ordered by name, with their rewards attached; and the
    number of rewards that score no trajectory (an unknown name, or a step index
    without a trajectory to index into)."""
    by_name: dict[str, Trajectory] = {}
    call_places: dict[str, tuple[Trajectory, int]] = {}
    for call in calls:
        trajectory = by_name.get(call.trajectory_name)
        if trajectory is None:
            trajectory = by_name[call.trajectory_name] = Trajectory(
                session_id, call.trajectory_name, []
            )
        call_places[call.call_id] = (trajectory, len(trajectory.calls))
        trajectory.calls.append(call)
    step_sums: dict[tuple[str, int], float] = defaultdict(float)
    unmatched = 0
    for reward in rewards:
        targets = _targets(reward, by_name, call_places)
        unmatched += not targets
        for trajectory, step in targets:
            trajectory.rewards.append(reward)
            if reward.level != _STEP and reward.thread_id:
                thread = reward.thread_id
                trajectory.thread_rewards[thread] = (
                    trajectory.thread_rewards.get(thread, 0.0) + reward.value
                )
                trajectory.has_reward = True
            elif reward.level != _STEP:
                trajectory.reward += reward.value
                trajectory.has_reward = True
            elif step is None or not 0 <= step < len(trajectory.calls):
                trajectory.unplaced_step_rewards += 1
            else:
                step_sums[trajectory.name, step] += reward.value
    for (name, step), value in step_sums.items():
        by_name[name].step_rewards[step] = value
    return [by_name[name] for name in sorted(by_name)], unmatched


def _targets(
    reward: reward_pb2.Reward,
    by_name: dict[str, Trajectory],
    call_places: dict[str, tuple[Trajectory, int]],
) -> list[tuple[Trajectory, int | None]]:
    if reward.level == _STEP and reward.WhichOneof("step") == "call_id":
        place = call_places.get(reward.call_id)
        return [place] if place is not None else []
    step = reward.step_index if reward.level == _STEP else None
    if reward.trajectory_name or "" in by_name:
        trajectory = by_name.get(reward.trajectory_name)
        return [(trajectory, step)] if trajectory is not None else []
    if reward.level == _STEP:
        # A step index means nothing across several named trajectories.
        return [(next(iter(by_name.values())), step)] if len(by_name) == 1 else []
    return [(trajectory, None) for trajectory in by_name.values()]

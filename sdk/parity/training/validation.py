"""Validation: the agent on held-out tasks, n samples each, never trained on; mean reward and pass@k.

pass@k is the unbiased estimator of Chen et al. (2021): for a task with n samples of
which c pass, 1 - C(n-c, k) / C(n, k), averaged over the tasks. A sample passes when
its reward is at least the run's `val_pass_threshold`; a failed or unrewarded
sample never passes and is left out of the mean reward.

An agent that returns None is scored by one trajectory of its session (the unnamed one
unless the run names another): its trajectory reward, or, for a trajectory rewarded
only by steps, its last rewarded step's, the outcome the steps led to.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc
import structlog

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.assembler.v1 import trajectory_pb2
from parity.clients import AssemblerClient, RPCError
from parity.engine import RolloutResult

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ValidationResult:
    step: int
    reward: float
    """Mean reward of the samples that have one; NaN when none has."""
    pass_at: dict[int, float]
    task_count: int
    sample_count: int
    failed_count: int

    def values(self) -> dict[str, float]:
        values = {
            "reward": self.reward,
            "samples": float(self.sample_count),
            "failed": float(self.failed_count),
        }
        values.update({f"pass@{k}": value for k, value in self.pass_at.items()})
        return values


def trajectory_score(trajectory: trajectory_pb2.Trajectory) -> float | None:
    """A trajectory's validation score; None when nothing rewarded it."""
    if trajectory.has_reward:
        return trajectory.reward
    rewarded = [step.reward for step in trajectory.steps if step.has_reward]
    return rewarded[-1] if rewarded else None


@dataclass
class RolloutScorer:
    """A validation rollout's reward: the agent's returned one, else its session's trajectory's."""

    assembler: AssemblerClient
    trajectory_name: str = ""
    _warned: bool = field(default=False, init=False)

    def __call__(self, result: RolloutResult) -> float | None:
        if result.reward is not None:
            return result.reward
        request = assembler_pb.GetTrajectoryRequest(
            session_id=result.session_id, trajectory_name=self.trajectory_name
        )
        try:
            return trajectory_score(self.assembler.get_trajectory(request).trajectory)
        except RPCError as error:
            # A misspelt val_trajectory would otherwise leave every validation silently unscored.
            if error.code == grpc.StatusCode.NOT_FOUND and not self._warned:
                self._warned = True
                log.warning("validation_trajectory_missing", trajectory=self.trajectory_name,
                            session_id=result.session_id, error=error.message)  # fmt: skip
            return None


def pass_at_k(samples: int, passed: int, k: int) -> float:
    if samples - passed < k:
        return 1.0
    return 1.0 - math.comb(samples - passed, k) / math.comb(samples, k)


def summarize(
    step: int,
    results: Sequence[RolloutResult],
    threshold: float,
    samples_per_task: int,
    reward_of: Callable[[RolloutResult], float | None],
) -> ValidationResult:
    """One ValidationResult from the final attempt of every validation rollout."""
    final: dict[tuple[str, int], RolloutResult] = {}
    for result in results:
        key = (result.task_id, result.rollout)
        if key not in final or result.attempt > final[key].attempt:
            final[key] = result
    rewards: list[float] = []
    passed: defaultdict[str, int] = defaultdict(int)
    failed = 0
    for result in final.values():
        reward = reward_of(result) if result.outcome == "succeeded" else None
        if reward is None:
            failed += result.outcome != "succeeded"
            continue
        rewards.append(reward)
        passed[result.task_id] += reward >= threshold
    tasks = {task_id for task_id, _ in final}
    ks = sorted({1, samples_per_task})
    pass_at = {
        k: sum(pass_at_k(samples_per_task, passed[t], k) for t in tasks) / max(1, len(tasks))
        for k in ks
    }
    mean = sum(rewards) / len(rewards) if rewards else float("nan")
    return ValidationResult(step, mean, pass_at, len(tasks), len(final), failed)

"""pass@k and the validation summary."""

from __future__ import annotations

import math

import pytest

from parity.api.assembler.v1 import trajectory_pb2
from parity.engine import RolloutResult
from parity.training.validation import pass_at_k, summarize, trajectory_score


def result(
    task: str, rollout: int, reward: float | None, outcome: str = "succeeded", attempt: int = 0
) -> RolloutResult:
    return RolloutResult(
        task,
        f"g-{task}",
        rollout,
        attempt,
        f"s-{task}-{rollout}-{attempt}",
        outcome,  # type: ignore[arg-type]
        reward,
        "",
        0.1,
    )


@pytest.mark.parametrize(("n", "c", "k"), [(4, 0, 1), (4, 1, 1), (4, 2, 2), (4, 4, 4), (10, 3, 5)])
def test_pass_at_k_is_the_unbiased_estimator(n: int, c: int, k: int) -> None:
    expected = 1 - math.comb(n - c, k) / math.comb(n, k) if n - c >= k else 1.0
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_summary_uses_final_attempts_and_leaves_failures_out_of_the_mean() -> None:
    results = [
        result("a", 0, 1.0), result("a", 1, 0.0),
        result("b", 0, None, "failed"), result("b", 0, 1.0, attempt=1), result("b", 1, None, "timed_out"),
    ]  # fmt: skip
    summary = summarize(5, results, threshold=1.0, samples_per_task=2, reward_of=lambda r: r.reward)
    assert summary.step == 5 and summary.task_count == 2 and summary.sample_count == 4
    assert summary.failed_count == 1
    assert summary.reward == pytest.approx(2 / 3)
    # Task a: 1 of 2 passed; task b: 1 of 2 (the timed-out rollout never passes).
    assert summary.pass_at[1] == pytest.approx(0.5)
    assert summary.pass_at[2] == pytest.approx(1.0)


def test_a_trajectory_scores_by_its_reward_else_by_its_last_rewarded_step() -> None:
    steps = [trajectory_pb2.Step(step_index=0, reward=1.0, has_reward=True),
             trajectory_pb2.Step(step_index=1, reward=0.0, has_reward=True), trajectory_pb2.Step(step_index=2)]  # fmt: skip
    assert trajectory_score(trajectory_pb2.Trajectory(steps=steps)) == 0.0
    assert (
        trajectory_score(trajectory_pb2.Trajectory(steps=steps, reward=0.5, has_reward=True)) == 0.5
    )
    assert trajectory_score(trajectory_pb2.Trajectory(steps=steps[2:])) is None

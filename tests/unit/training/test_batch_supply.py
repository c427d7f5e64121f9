"""How a step's batch is fed: its tasks in the run's order, top-ups for groups the assembler dropped, and the
end of a run whose agent or rewards cannot make a batch."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest

from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.engine import RolloutResult
from parity.training import batch_supply
from parity.training.batch_supply import BatchSupply
from parity.training.run_control import AgentFailing, RewardsSaturated
from parity.training.settings import TrainSettings
from parity.training.task_order import TaskOrder

TASKS = [{"id": f"t{n}"} for n in range(5)]
WAITING = trainer_pb.GetStatusResponse(run={"state": run_pb2.RUN_STATE_WAITING_FOR_DATA})
TRAINING = trainer_pb.GetStatusResponse(run={"state": run_pb2.RUN_STATE_TRAINING})


class Runner:
    """Rolls out at once, every rollout with the given outcome and reward."""

    def __init__(self, outcome: str = "succeeded", reward: float | None = None) -> None:
        self.outcome = outcome
        self.reward = reward
        self.submitted: list[list[str]] = []

    def submit(self, tasks: list[dict[str, Any]], *, prefix: str, rollouts_per_task: int, sampling: Any,
               validation: bool = False) -> concurrent.futures.Future[list[RolloutResult]]:  # fmt: skip
        self.submitted.append([task["id"] for task in tasks])
        future: concurrent.futures.Future[list[RolloutResult]] = concurrent.futures.Future()
        future.set_result([RolloutResult(task["id"], task["id"], n, 0, f"{prefix}-{n}", self.outcome, self.reward,  # type: ignore[arg-type]
                                         "agent raised" if self.outcome != "succeeded" else "", 0.1)
                           for task in tasks for n in range(rollouts_per_task)])  # fmt: skip
        return future


class Assembler:
    def __init__(self, pending_groups: int) -> None:
        self.pending_groups = pending_groups
        self.released: list[str] = []

    def get_stats(self, request: Any) -> Any:
        # Another run on the same assembler dropped groups too: only a request naming the run leaves them out.
        filtered = (
            {"equal_rewards": 4}
            if request.run_id == "run"
            else {"equal_rewards": 9, "stale_sample": 3}
        )
        return SimpleNamespace(pending_group_count=self.pending_groups, filtered_counts=filtered)

    def release_batch(self, request: Any) -> Any:
        self.released.append(request.run_id)
        return SimpleNamespace(pending_group_count=self.pending_groups)


def supply(runner: Runner, assembler: Assembler, **settings: Any) -> BatchSupply:
    values = {
        "groups_per_batch": 2,
        "rollouts_per_task": 2,
        "retries": 0,
        "max_tokens": 64,
    } | settings
    return BatchSupply(
        runner,  # type: ignore[arg-type]
        assembler,  # type: ignore[arg-type]
        TaskOrder(TASKS, seed=1),
        TrainSettings(**values),
        "run",
        "model",
    )


def test_task_order_is_every_task_once_an_epoch_in_a_seeded_order_and_a_resume_continues_it() -> (
    None
):
    taken = [task["id"] for task in TaskOrder(TASKS, seed=7).take(10)]
    assert sorted(taken[:5]) == sorted(taken[5:]) == [task["id"] for task in TASKS]
    assert taken != [task["id"] for task in TaskOrder(TASKS, seed=8).take(10)]
    resumed = TaskOrder(TASKS, seed=7)
    resumed.skip(4)
    assert [task["id"] for task in resumed.take(6)] == taken[4:]


def test_a_batch_short_of_dropped_groups_is_topped_up_once_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch_supply, "TOP_UP_IDLE_S", 0.0)
    runner = Runner()
    feed = supply(runner, Assembler(pending_groups=1))
    futures = feed.begin(1)
    assert len(runner.submitted) == 1 and len(runner.submitted[0]) == 2
    assert feed.top_up(futures, TRAINING, None, 1) is None, (
        "no top-up while the trainer is not waiting"
    )
    idle_since = feed.top_up(futures, WAITING, None, 1)
    assert idle_since is not None and len(runner.submitted) == 1, "the idle clock starts first"
    assert feed.top_up(futures, WAITING, idle_since, 1) is None
    assert len(futures) == 2 and len(runner.submitted[1]) == 1, "one task for the one missing group"
    assert feed.step_values()["extra_tasks"] == 1


def test_a_step_that_cannot_form_a_batch_ends_the_run_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch_supply, "TOP_UP_IDLE_S", 0.0)
    feed = supply(Runner(), Assembler(pending_groups=0))
    futures = feed.begin(3)
    with pytest.raises(
        AgentFailing, match=r"no batch for step 3 after 16 extra tasks.*\(equal_rewards: 4\)\."
    ) as ended:
        for _ in range(100):
            feed.top_up(futures, WAITING, 0.0, 3)
    assert ended.value.step == 2


def test_a_batchs_worth_of_failed_rollouts_in_a_row_ends_the_run() -> None:
    feed = supply(Runner("failed"), Assembler(pending_groups=0))
    futures = feed.begin(1)
    with pytest.raises(
        AgentFailing, match="the agent failed 4 rollouts in a row; the last: agent raised"
    ):
        feed.raise_if_agent_failing(futures, 1)
    succeeding = supply(Runner(), Assembler(pending_groups=0))
    succeeding.raise_if_agent_failing(succeeding.begin(1), 1)


def spend_the_extra_task_budget(
    feed: BatchSupply, futures: list[Any], step: int, missing: int
) -> None:
    """Top up until the budget (MAX_TOP_UPS_PER_GROUP tasks per group of the batch) is spent, `missing` at a time."""
    for _ in range(batch_supply.MAX_TOP_UPS_PER_GROUP * feed.settings.groups_per_batch // missing):
        feed.top_up(futures, WAITING, 0.0, step)


def test_once_the_extra_task_budget_is_spent_the_step_trains_on_the_groups_that_vary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch_supply, "TOP_UP_IDLE_S", 0.0)
    assembler = Assembler(pending_groups=1)
    feed = supply(Runner(reward=1.0), assembler)
    futures = feed.begin(2)
    spend_the_extra_task_budget(feed, futures, 2, missing=1)
    assert assembler.released == []
    assert feed.top_up(futures, WAITING, 0.0, 2) is None
    assert assembler.released == ["run"], "the one group with signal is released as a short batch"


def test_a_step_whose_every_rollout_earns_the_runs_top_reward_ends_the_run_early_and_completed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch_supply, "TOP_UP_IDLE_S", 0.0)
    feed = supply(Runner(reward=1.0), Assembler(pending_groups=0))
    futures = feed.begin(5)
    spend_the_extra_task_budget(feed, futures, 5, missing=2)
    with pytest.raises(RewardsSaturated, match=r"earned the run's top reward \(1\)") as ended:
        feed.top_up(futures, WAITING, 0.0, 5)
    assert (ended.value.state, ended.value.step) == ("completed", 4)


def test_equal_rewards_below_the_runs_best_or_before_any_training_fail_the_run_with_advice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch_supply, "TOP_UP_IDLE_S", 0.0)
    first = supply(Runner(reward=1.0), Assembler(pending_groups=0))
    futures = first.begin(1)
    spend_the_extra_task_budget(first, futures, 1, missing=2)
    with pytest.raises(AgentFailing, match="every rollout earned 1") as ended:
        first.top_up(futures, WAITING, 0.0, 1)
    assert ended.value.state == "failed"
    runner = Runner(reward=1.0)
    collapsed = supply(runner, Assembler(pending_groups=0))
    collapsed.begin(1)
    runner.reward = 0.0
    futures = collapsed.begin(3)
    spend_the_extra_task_budget(collapsed, futures, 3, missing=2)
    with pytest.raises(AgentFailing, match="every rollout earned 0") as ended:
        collapsed.top_up(futures, WAITING, 0.0, 3)
    assert ended.value.state == "failed", "rewards that fell to the bottom are not a finished run"


def test_each_step_counts_the_tasks_it_passed_over_for_groups_that_stayed_flat() -> None:
    runner = Runner(reward=1.0)
    settings = TrainSettings(groups_per_batch=2, rollouts_per_task=2, retries=0, max_tokens=64)
    feed = BatchSupply(runner, Assembler(pending_groups=2), TaskOrder(TASKS, seed=1, by_signal=True), settings,  # type: ignore[arg-type]
                       "run", "model")  # fmt: skip
    feed.begin(1)
    assert feed.step_values() == {"extra_tasks": 0.0, "tasks_passed_over": 0.0}, (
        "nothing is known of any task yet"
    )
    passed = []
    for step in range(2, 12):
        feed.begin(step)
        passed.append(feed.step_values()["tasks_passed_over"])
    assert sum(passed) == feed.tasks.passed_over > 0, (
        "every group earned 1 in each rollout: flat tasks are passed over"
    )
    assert all(len(tasks) == 2 for tasks in runner.submitted), (
        "a step still rolls out a batch's worth of tasks"
    )

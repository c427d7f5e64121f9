"""Selection by signal: tasks whose groups keep earning one reward are passed over more often, never for good."""

from __future__ import annotations

from collections import Counter

from parity.engine import RolloutResult
from parity.training.task_order import MIN_KEEP, TaskOrder

TASKS = [{"id": f"t{n}"} for n in range(6)]


def group(
    task_id: str, rewards: list[float | None], outcome: str = "succeeded", group_id: str = ""
) -> list[RolloutResult]:
    return [RolloutResult(task_id, group_id or f"s1-{task_id}", n, 0, f"{task_id}-{n}", outcome, reward, "", 0.1)  # type: ignore[arg-type]
            for n, reward in enumerate(rewards)]  # fmt: skip


def ids(tasks: list[dict[str, str]]) -> list[str]:
    return [task["id"] for task in tasks]


def test_with_nothing_observed_selection_takes_the_uniform_order() -> None:
    assert ids(TaskOrder(TASKS, seed=3, by_signal=True).take(20)) == ids(
        TaskOrder(TASKS, seed=3).take(20)
    )


def test_tasks_whose_groups_stay_flat_are_passed_over_but_never_for_good() -> None:
    order = TaskOrder(TASKS, seed=3, by_signal=True)
    for streak in range(4):
        order.observe(group("t0", [0.0, 0.0, 0.0]))  # never solved
        order.observe(group("t1", [1.0, 1.0, 1.0]))  # solved every time
        order.observe(group("t2", [0.0, 1.0, 0.0], group_id=f"s{streak}-t2"))
    assert order.keep_probability({"id": "t0"}) == order.keep_probability({"id": "t1"}) == MIN_KEEP
    assert order.keep_probability({"id": "t2"}) == order.keep_probability({"id": "t5"}) == 1.0

    counts = Counter(ids(order.take(600)))
    flat, varied = [counts["t0"], counts["t1"]], [counts[f"t{n}"] for n in range(2, 6)]
    assert min(flat) > 0, "a flat task still comes up: the model may have changed"
    assert max(flat) * 3 < min(varied)
    assert order.passed_over > 0
    # Every epoch offers each task once and a varied one is taken every time: a whole epoch apart at most.
    assert max(varied) - min(varied) <= 1
    assert min(varied) >= (600 + order.passed_over) // len(TASKS) - 1


def test_a_group_that_varies_ends_the_streak() -> None:
    order = TaskOrder(TASKS, seed=3, by_signal=True)
    order.observe(group("t0", [0.0, 0.0]))
    order.observe(group("t0", [0.0, 0.0]))
    assert order.keep_probability({"id": "t0"}) == 0.25
    order.observe(group("t0", [0.0, 0.5]))
    assert order.keep_probability({"id": "t0"}) == 1.0


def test_failed_rollouts_and_lone_rewards_say_nothing_about_a_task() -> None:
    order = TaskOrder(TASKS, seed=3, by_signal=True)
    order.observe(group("t0", [0.0, 0.0], outcome="failed"))
    order.observe(group("t1", [0.0]))
    order.observe(group("t2", [0.0, None]))
    assert all(order.keep_probability(task) == 1.0 for task in TASKS)


def test_uniform_order_ignores_what_it_observes() -> None:
    order = TaskOrder(TASKS, seed=3)
    for task in TASKS:
        order.observe(group(task["id"], [0.0, 0.0]))
    assert ids(order.take(20)) == ids(TaskOrder(TASKS, seed=3).take(20)) and order.passed_over == 0

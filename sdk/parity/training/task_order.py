"""The order a run takes its tasks in: epoch after epoch, each epoch shuffled anew from the seed.

With selection by signal, a task whose recent groups each earned one reward for every
rollout (solved every time, or never) is passed over with a probability that grows with
that streak: such a group is dropped by the assembler and costs a top-up. Rollouts then
go to tasks whose rewards have varied, in the spirit of GRESO's pre-rollout filtering
(arXiv 2506.02177). No task is ever passed over for good: the model changes, and a task
it never solved may vary next time (docs/design/task-selection.md).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from parity.core.group_returns import has_no_variance
from parity.engine import RolloutResult
from parity.training.tasks import TASK_ID_KEY

TASK_SELECTIONS = ("signal", "uniform")
# A task is kept with probability KEEP_PER_FLAT_GROUP ** (its flat groups in a row), never below MIN_KEEP.
KEEP_PER_FLAT_GROUP = 0.5
MIN_KEEP = 0.125


class TaskOrder:
    def __init__(
        self, tasks: Sequence[dict[str, Any]], seed: int, *, by_signal: bool = False
    ) -> None:
        self._order = _epochs(list(tasks), random.Random(seed))
        self._by_signal = by_signal
        # A stream of its own, so the epochs' order is the same with selection on or off.
        self._selection = random.Random(f"{seed}:selection")
        self._flat_streak: dict[str, int] = {}
        self.passed_over = 0

    def take(self, count: int) -> list[dict[str, Any]]:
        taken: list[dict[str, Any]] = []
        while len(taken) < count:
            task = next(self._order)
            if self._by_signal and self._selection.random() >= self.keep_probability(task):
                self.passed_over += 1
                continue
            taken.append(task)
        return taken

    def skip(self, count: int) -> None:
        """Pass over tasks already rolled out: a resumed run continues the order where its checkpoint left it."""
        for _ in range(count):
            next(self._order)

    def keep_probability(self, task: dict[str, Any]) -> float:
        streak = self._flat_streak.get(str(task.get(TASK_ID_KEY)), 0)
        return max(MIN_KEEP, KEEP_PER_FLAT_GROUP**streak)

    def observe(self, results: Iterable[RolloutResult]) -> None:
        """Record, per task, whether each finished group's rewards varied; failed rollouts do not count."""
        groups: dict[tuple[str, str], list[float]] = {}
        for result in results:
            if result.outcome == "succeeded" and result.reward is not None:
                groups.setdefault((result.task_id, result.group_id), []).append(result.reward)
        for (task_id, _), rewards in groups.items():
            if len(rewards) >= 2:
                self._flat_streak[task_id] = (
                    self._flat_streak.get(task_id, 0) + 1 if has_no_variance(rewards) else 0
                )


def _epochs(tasks: list[dict[str, Any]], rng: random.Random) -> Iterator[dict[str, Any]]:
    while True:
        order = list(tasks)
        rng.shuffle(order)
        yield from order

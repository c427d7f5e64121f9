"""The order a run takes its tasks in: epoch after epoch, each epoch shuffled anew from the seed."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any


class TaskOrder:
    def __init__(self, tasks: Sequence[dict[str, Any]], seed: int) -> None:
        self._order = _epochs(list(tasks), random.Random(seed))

    def take(self, count: int) -> list[dict[str, Any]]:
        return [next(self._order) for _ in range(count)]

    def skip(self, count: int) -> None:
        """Pass over tasks already rolled out: a resumed run continues the order where its checkpoint left it."""
        for _ in range(count):
            next(self._order)


def _epochs(tasks: list[dict[str, Any]], rng: random.Random) -> Iterator[dict[str, Any]]:
    while True:
        order = list(tasks)
        rng.shuffle(order)
        yield from order

"""Saying when a run is not learning: its training reward has not risen over many steps.

A batch's mean reward moves with the tasks drawn, so a run is called flat only when the
mean of its latest steps is no better than the mean of its first ones, after enough steps
for a learning run to have shown a rise, and while there is room left to rise.
"""

from __future__ import annotations

from collections.abc import Sequence

FLAT_AFTER_STEPS = 8
WINDOW = 4
MIN_RISE = 0.05
SATURATED = 0.95


def flat_reward_warning(rewards: Sequence[float], learning_rate: float | None) -> str:
    """A sentence for the progress line and the result, or "" while the run is learning (or too young to tell)."""
    if len(rewards) < FLAT_AFTER_STEPS:
        return ""
    first = sum(rewards[:WINDOW]) / WINDOW
    last = sum(rewards[-WINDOW:]) / WINDOW
    if last >= first + MIN_RISE or last >= SATURATED:
        return ""
    rate = f" at learning rate {learning_rate:g}" if learning_rate else ""
    return (
        f"reward flat for {len(rewards)} steps ({first:.3f} -> {last:.3f}){rate}: the model may not be learning; "
        "try a larger --learning-rate, or check that rewards differ between a task's rollouts"
    )

"""Progress in a log is whole lines, one per step; on a terminal it is tqdm's bar."""

from __future__ import annotations

import io
import os

from tqdm.auto import tqdm

from parity.core.progress import ProgressLines, show_progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_training_run_logs_one_whole_line_per_step_and_validation() -> None:
    log, clock = io.StringIO(), Clock()
    progress = ProgressLines(total=3, desc="training run-1", unit="step", file=log, clock=clock)
    # As Trainer.train drives it: validation, then each step's update and its postfix.
    progress.set_postfix({"val_reward": "0.300"})
    for reward in ("0.310", "0.520", "0.900"):
        clock.now += 14.0
        progress.update(1)
        progress.set_postfix({"reward": reward, "val_reward": "0.300"})
    progress.set_postfix({"reward": "0.900", "val_reward": "0.960"})
    progress.close()

    text = log.getvalue()
    assert "\r" not in text and text.endswith("\n")
    assert text.splitlines() == [
        "training run-1: 0/3 steps, 00:00 elapsed, val_reward=0.300",
        "training run-1: 1/3 steps, 00:14 elapsed, 14.00 s/step, reward=0.310, val_reward=0.300",
        "training run-1: 2/3 steps, 00:28 elapsed, 14.00 s/step, reward=0.520, val_reward=0.300",
        "training run-1: 3/3 steps, 00:42 elapsed, 14.00 s/step, reward=0.900, val_reward=0.300",
        "training run-1: 3/3 steps, 00:42 elapsed, 14.00 s/step, reward=0.900, val_reward=0.960",
    ]


def test_a_resumed_run_counts_its_rate_from_where_it_resumed() -> None:
    log, clock = io.StringIO(), Clock()
    progress = ProgressLines(total=30, desc="t", unit="step", initial=20, file=log, clock=clock)
    clock.now += 10.0
    progress.update(1)
    progress.set_postfix(reward="0.5")
    assert log.getvalue() == "t: 21/30 steps, 00:10 elapsed, 10.00 s/step, reward=0.5\n"


def test_a_fast_count_writes_a_line_every_interval_and_its_end() -> None:
    log, clock = io.StringIO(), Clock()
    progress = ProgressLines(
        total=100, desc="rollouts", unit="rollout", file=log, every_s=30.0, clock=clock
    )
    for _ in range(100):
        clock.now += 1.0
        progress.update(1)
        progress.set_postfix(failed_attempts=0, refresh=False)
    progress.close()
    lines = log.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "rollouts: 30/100 rollouts", "rollouts: 60/100 rollouts", "rollouts: 90/100 rollouts",
        "rollouts: 100/100 rollouts",
    ]  # fmt: skip
    assert lines[0] == "rollouts: 30/100 rollouts, 00:30 elapsed, 1.00 s/rollout, failed_attempts=0"


def test_a_fast_rate_reads_per_second() -> None:
    clock = Clock()
    progress = ProgressLines(total=None, desc="r", unit="rollout", file=io.StringIO(), clock=clock)
    clock.now += 2.0
    progress.update(8)
    assert progress.line() == "r: 8 rollouts, 00:02 elapsed, 4.00 rollouts/s"


def test_a_pipe_gets_lines_a_terminal_gets_the_bar_and_disabled_shows_nothing() -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as pipe:
        assert isinstance(show_progress(total=3, desc="d", unit="step", file=pipe), ProgressLines)
    os.close(read_end)

    controller, terminal = os.openpty()
    with os.fdopen(terminal, "w") as tty:
        bar = show_progress(total=3, desc="d", unit="step", file=tty)
        assert isinstance(bar, tqdm) and not bar.disable
        bar.close()
    os.close(controller)

    quiet = io.StringIO()
    hidden = show_progress(total=3, desc="d", unit="step", file=quiet, enabled=False)
    hidden.update(1)
    hidden.close()
    assert isinstance(hidden, tqdm) and quiet.getvalue() == ""

"""Feeding a trainer's run step by step from a test: roll out its step's groups once it waits for them, and
one more group for each one the assembler drops, until the trainer has trained the step.

A group whose rewards all tie teaches nothing, and the assembler drops it; a test that rolls out exactly a
step's groups then waits forever on an unlucky draw. The assembler's per-run drop counts say when, so the
top-up follows a real signal, not a timer.
"""

from __future__ import annotations

from collections.abc import Callable

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as pb
from parity.clients import AssemblerClient, TrainerClient
from tests.waiting import eventually

TERMINAL = (run_pb2.RUN_STATE_COMPLETED, run_pb2.RUN_STATE_FAILED, run_pb2.RUN_STATE_STOPPED)
DROPPED_GROUP_REASONS = ("zero_variance_group", "empty_group")


def dropped_groups(assembler: AssemblerClient, run_id: str) -> int:
    """How many of the run's groups the assembler has dropped so far."""
    stats = assembler.get_stats(assembler_pb.GetStatsRequest(run_id=run_id))
    return sum(stats.filtered_counts.get(reason, 0) for reason in DROPPED_GROUP_REASONS)


def train_step(trainer: TrainerClient, assembler: AssemblerClient, run_id: str, step: int,
               roll_out: Callable[[int, str], None], *, timeout_s: float) -> run_pb2.Run:  # fmt: skip
    """Feed step `step` of the run: once it waits for that step's rollouts, `roll_out(groups, tag)` its groups,
    then one group per group dropped meanwhile. Returns the run once it has trained the step, or once it ended
    (a failed run is the caller's to judge); AssertionError naming the step past `timeout_s` for each wait."""

    def run_now() -> run_pb2.Run:
        return trainer.get_run(pb.GetRunRequest(run_id=run_id)).run

    def waiting_after(done: int) -> run_pb2.Run | None:
        now = run_now()
        waiting = now.state == run_pb2.RUN_STATE_WAITING_FOR_DATA and now.step >= done
        return now if waiting or now.state in TERMINAL else None

    ready = eventually(lambda: waiting_after(step - 1), timeout_s=timeout_s, interval_s=0.2,
                       what=f"run {run_id} waiting for step {step}'s rollouts")  # fmt: skip
    if ready.state in TERMINAL:
        return ready
    dropped_before, extra = dropped_groups(assembler, run_id), 0
    roll_out(ready.config.groups_per_batch, "groups")

    def trained() -> run_pb2.Run | None:
        nonlocal extra
        if (done := waiting_after(step)) is not None:
            return done
        if dropped_groups(assembler, run_id) - dropped_before > extra:
            extra += 1
            roll_out(1, f"extra{extra}")
        return None

    return eventually(trained, timeout_s=timeout_s, interval_s=0.2,
                      what=lambda: f"run {run_id} trained step {step} (now {describe(run_now())})")  # fmt: skip


def train_to_end(trainer: TrainerClient, assembler: AssemblerClient, run_id: str,
                 roll_out: Callable[[int, str], None], *, step_timeout_s: float) -> run_pb2.Run:  # fmt: skip
    """Feed the run step after step until it ends; the ended run."""
    run = trainer.get_run(pb.GetRunRequest(run_id=run_id)).run
    while run.state not in TERMINAL:
        run = train_step(
            trainer, assembler, run_id, run.step + 1, roll_out, timeout_s=step_timeout_s
        )
    return run


def describe(run: run_pb2.Run) -> str:
    return f"step {run.step} of {run.config.total_steps}, {run_pb2.RunState.Name(run.state)}"


def stop_active_runs(trainer: TrainerClient) -> None:
    """Stop every run still active, so a failed test's runs do not hold the next test's slots."""
    for run in trainer.list_runs(pb.ListRunsRequest()).runs:
        if run.state not in TERMINAL:
            trainer.stop_run(pb.StopRunRequest(run_id=run.run_id))

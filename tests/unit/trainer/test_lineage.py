"""The trainer's record of which sessions, and whose, each step trained on."""

from __future__ import annotations

from pathlib import Path

from parity.api.trainer.v1 import trainer_service_pb2 as pb
from parity.services.trainer.run_history import RunHistory
from parity.services.trainer.run_settings import RunSettings
from parity.services.trainer.run_status import RunStatus
from parity.services.trainer.step_metrics import StepRecord


def _batch(run_id: str, step: int, samples: list[tuple[str, str]]) -> pb.StepBatch:
    return pb.StepBatch(run_id=run_id, step=step, samples=[
        pb.TrainedSample(sample_id=f"{session}-0", session_id=session, end_user_id=user) for session, user in samples
    ])  # fmt: skip


def _train(history: RunHistory, run: RunStatus, step: int, samples: list[tuple[str, str]]) -> None:
    history.record_step(
        StepRecord(run.run_id, step, 1000.0 * step, {}), _batch(run.run_id, step, samples)
    )


def _found(
    history: RunHistory, user: str = "", sessions: tuple[str, ...] = ()
) -> list[tuple[str, int, list[str]]]:
    return [
        (s.run_id, s.step, list(s.session_ids))
        for s in history.trained_sessions(user, list(sessions))
    ]


def test_steps_are_found_by_end_user_and_by_session_across_runs(tmp_path: Path) -> None:
    history = RunHistory(tmp_path / "runs")
    first, second = (
        RunStatus(run_id, RunSettings(Path("/m"), 5, groups_per_batch=1, learning_rate=1e-5))
        for run_id in ("run-a", "run-b")
    )
    for run in (first, second):
        history.start(run, [])
    _train(history, first, 1, [("s1", "ann"), ("s2", "bob"), ("s1", "ann")])
    _train(history, first, 2, [("s3", "bob")])
    _train(history, second, 1, [("s4", "ann"), ("s5", "")])
    assert _found(history, "ann") == [("run-a", 1, ["s1"]), ("run-b", 1, ["s4"])]
    assert _found(history, "bob") == [("run-a", 1, ["s2"]), ("run-a", 2, ["s3"])]
    assert _found(history, sessions=("s3", "s5")) == [("run-a", 2, ["s3"]), ("run-b", 1, ["s5"])]
    assert _found(history, "nobody") == []
    [step] = history.trained_sessions("bob", ["s3"])[1:]
    assert step.train_time.seconds == 2000


def test_a_resumed_run_forgets_the_steps_it_trains_again(tmp_path: Path) -> None:
    history = RunHistory(tmp_path / "runs")
    run = RunStatus("run-a", RunSettings(Path("/m"), 5, groups_per_batch=1, learning_rate=1e-5))
    history.start(run, [])
    for step, session in ((1, "s1"), (2, "s2"), (3, "s3")):
        _train(history, run, step, [(session, "ann")])
    run.step = 1
    history.start(run, [])
    _train(history, run, 2, [("s9", "ann")])
    assert _found(history, "ann") == [("run-a", 1, ["s1"]), ("run-a", 2, ["s9"])]

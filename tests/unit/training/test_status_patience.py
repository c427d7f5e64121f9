"""A trainer slow to answer a status poll (a step in progress on a loaded host) does not fail the run; one
that stays silent past the patience does, with the reason."""

from __future__ import annotations

import grpc
import pytest
import structlog.testing

from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import RPCError
from parity.training import run_control
from parity.training.run_control import RunControl


class SlowTrainer:
    """Answers once, then only past its deadline."""

    def __init__(self) -> None:
        self.polls = 0

    def get_status(self, request: trainer_pb.GetStatusRequest) -> trainer_pb.GetStatusResponse:
        self.polls += 1
        if self.polls == 1:
            return trainer_pb.GetStatusResponse(run={"run_id": "r", "step": 3})
        raise RPCError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", "GetStatus")


def test_a_late_status_answer_keeps_the_last_one_until_the_patience_runs_out(monkeypatch) -> None:
    control = RunControl(SlowTrainer(), "r", stack=None)  # type: ignore[arg-type]
    assert control.status().run.step == 3
    with structlog.testing.capture_logs() as logged:
        assert control.status().run.step == 3, "a late answer is not a failure"
    assert [entry["event"] for entry in logged] == ["trainer_status_late"]
    monkeypatch.setattr(run_control, "STATUS_PATIENCE_S", 0.0)
    with pytest.raises(RPCError, match="DEADLINE_EXCEEDED"):
        control.status()


def test_a_first_status_past_its_deadline_is_a_failure_at_once() -> None:
    trainer = SlowTrainer()
    trainer.polls = 1
    with pytest.raises(RPCError, match="DEADLINE_EXCEEDED"):
        RunControl(trainer, "r", stack=None).status()  # type: ignore[arg-type]

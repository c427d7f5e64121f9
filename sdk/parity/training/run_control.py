"""The trainer's run as the driver sees it over gRPC: its state, how it ended, its metrics and checkpoints."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Sequence
from typing import Any

import grpc
import structlog

from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import RPCError, TrainerClient
from parity.core.settings_fields import SettingsError
from parity.promotion import Promotion
from parity.training.local_stack import LocalStack

log = structlog.get_logger(__name__)

POLL_S = 0.2
METRICS_TIMEOUT_S = 30.0
# StartRun checks a LoRA run's replicas and a distillation run's teacher over HTTP, a cold server's first answer included.
START_RUN_TIMEOUT_S = 300.0
# Writing a model folder: the weights gathered and saved, and a LoRA run's adapter merged first when asked.
EXPORT_TIMEOUT_S = 600.0
# How long the trainer may go without answering a status poll in time before the run fails on it.
STATUS_PATIENCE_S = 300.0
TERMINAL = {
    run_pb2.RUN_STATE_COMPLETED: "completed",
    run_pb2.RUN_STATE_FAILED: "failed",
    run_pb2.RUN_STATE_STOPPED: "stopped",
}


class RunEnded(RuntimeError):
    """The trainer's run ended before the step asked for: failed, or stopped from elsewhere."""

    def __init__(self, state: str, message: str, step: int) -> None:
        super().__init__(message)
        self.state = state
        self.step = step


class AgentFailing(RunEnded):
    """Every rollout fails: the run cannot get data, so it ends rather than retry forever."""


class RewardsSaturated(RunEnded):
    """Every rollout of a step earned the run's top reward: no group varies, so the run ends early, completed."""


class RunControl:
    def __init__(self, trainer: TrainerClient, run_id: str, stack: LocalStack | None) -> None:
        self.trainer = trainer
        self.run_id = run_id
        self._stack = stack
        self._last_status: trainer_pb.GetStatusResponse | None = None
        self._last_status_at = 0.0

    def status(self) -> trainer_pb.GetStatusResponse:
        """The trainer's status. An answer past its deadline is not a failure while the last one is recent: a
        trainer in the middle of a step on a loaded host can be slow to answer (seen: 30 s at a load of 70 on
        2 cores), and the run's state cannot have changed unseen, since the next poll reads it."""
        if self._stack is not None:
            self._stack.raise_if_down()
        try:
            status = self.trainer.get_status(trainer_pb.GetStatusRequest(run_id=self.run_id))
        except RPCError as error:
            late = error.code == grpc.StatusCode.DEADLINE_EXCEEDED and self._last_status is not None
            if not late or time.monotonic() - self._last_status_at > STATUS_PATIENCE_S:
                raise
            log.warning("trainer_status_late", error=str(error))
            assert self._last_status is not None
            return self._last_status
        self._last_status, self._last_status_at = status, time.monotonic()
        return status

    def raise_if_ended(
        self, status: trainer_pb.GetStatusResponse, futures: Sequence[concurrent.futures.Future[Any]],
        expect_complete: bool = False,
    ) -> None:  # fmt: skip
        """RunEnded if the run has ended (its rollouts cancelled); else the error of a rollout batch that failed."""
        state = TERMINAL.get(status.run.state)
        if state is None or (state == "completed" and expect_complete):
            for future in futures:
                if future.done() and not future.cancelled() and future.exception() is not None:
                    raise future.exception()  # type: ignore[misc]
            return
        for future in futures:
            future.cancel()
        message = status.run.error_message or f"the run was {state} at step {status.run.step}"
        raise RunEnded(state, message, status.run.step)

    def start(self, request: trainer_pb.StartRunRequest) -> run_pb2.Run:
        """Start (or resume) the run, and return it once it is started. A run to resume that its trainer already
        resumed by itself (the trainer restarted while it trained) is taken up where the trainer has it."""
        run = (
            self._resumed_by_trainer(request)
            or self.trainer.start_run(request, timeout_s=START_RUN_TIMEOUT_S).run
        )
        self.wait_until_started()
        return run

    def _resumed_by_trainer(self, request: trainer_pb.StartRunRequest) -> run_pb2.Run | None:
        if not request.resume_checkpoint_id:
            return None
        try:
            run = self.trainer.get_run(trainer_pb.GetRunRequest(run_id=self.run_id)).run
        except RPCError as error:
            if error.code == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        if run.state in TERMINAL:
            return None
        if run.config.total_steps != request.config.total_steps:
            raise SettingsError("steps", (
                f"run {self.run_id} was resumed by its trainer when the trainer restarted, to train to step "
                f"{run.config.total_steps}; to train it to {request.config.total_steps}, stop it (TrainerService.StopRun) "
                "and resume it again"
            ))  # fmt: skip
        log.info("run_taken_up", run_id=self.run_id, step=run.step)
        return run

    def wait_until_started(self) -> None:
        """Until the trainer has loaded the run's policy into every replica: a validation or a rollout before then
        would sample whatever the replicas served before (the last run's weights, a restarted vLLM's)."""
        while (status := self.status()).run.state == run_pb2.RUN_STATE_STARTING:
            time.sleep(POLL_S)
        self.raise_if_ended(status, [])

    def wait_for(self, future: concurrent.futures.Future[Any], stopped_here: bool = False) -> None:
        """Until `future` is done; RunEnded if the run fails or is stopped first (one that completed goes on, and with
        `stopped_here`, one this driver stopped: a run that ended early validates after its stop)."""
        while not future.done():
            status = self.status()
            if not (stopped_here and status.run.state == run_pb2.RUN_STATE_STOPPED):
                self.raise_if_ended(status, [future], expect_complete=True)
            time.sleep(POLL_S)

    def wait_for_end(self) -> None:
        """After the last step: until the trainer has saved the final checkpoint and the plot."""
        while True:
            status = self.status()
            if status.run.state in TERMINAL:
                if status.run.state != run_pb2.RUN_STATE_COMPLETED:
                    self.raise_if_ended(status, [])
                return
            time.sleep(POLL_S)

    def step_metrics(self, step: int) -> dict[str, float]:
        request = trainer_pb.StreamMetricsRequest(from_step=step, run_id=self.run_id)
        try:
            for response in self.trainer.stream_metrics(request, timeout_s=METRICS_TIMEOUT_S):
                if response.metrics.step == step:
                    return dict(response.metrics.values)
        except RPCError as error:
            log.warning("step_metrics_unavailable", step=step, error=str(error))
        return {}

    def record_validation(self, step: int, values: dict[str, float]) -> None:
        """The trainer keeps it beside the run's steps, for readers like the console; the run goes on without."""
        request = trainer_pb.WriteValidationMetricsRequest(
            run_id=self.run_id, step=step, values=values
        )
        try:
            self.trainer.write_validation_metrics(request)
        except RPCError as error:
            log.warning("validation_not_recorded", run_id=self.run_id, step=step, error=str(error))

    def export(self, output_dir: str, merge_lora: bool) -> str:
        """Have the trainer write the latest checkpoint's policy to `output_dir`; returns the folder it wrote (the
        merged model's, when a LoRA run's adapter is merged)."""
        # This run's own latest checkpoint: the trainer's default is the latest run's, which another may be.
        latest = self.trainer.list_checkpoints(
            trainer_pb.ListCheckpointsRequest(run_id=self.run_id, page_size=1)
        ).checkpoints
        request = trainer_pb.ExportPolicyRequest(
            output_dir=output_dir, merge_lora=merge_lora,
            checkpoint_id=latest[0].checkpoint_id if latest else "",
        )  # fmt: skip
        response = self.trainer.export_policy(request, timeout_s=EXPORT_TIMEOUT_S)
        log.info("policy_exported", path=response.path, merged=response.merged_path,
                 checkpoint=response.checkpoint.checkpoint_id)  # fmt: skip
        return response.merged_path or response.path

    def latest_checkpoint(self) -> run_pb2.Checkpoint | None:
        """The run's newest checkpoint the trainer knows of; None if it has none."""
        found = self.trainer.list_checkpoints(
            trainer_pb.ListCheckpointsRequest(run_id=self.run_id, page_size=1)
        )
        return found.checkpoints[0] if found.checkpoints else None

    def promote(self, metric: str, margin: float, served_model: str = "") -> str:
        """Ask the trainer to gate the run's latest checkpoint and, if it passes, serve it to users (with
        `served_model`, to those whose agents ask for it); says what it decided. A trainer that cannot decide (no
        serving replicas, unreachable) is reported, not raised: the run itself completed."""
        request = trainer_pb.PromotePolicyRequest(
            run_id=self.run_id, metric=metric, margin=margin, served_model=served_model
        )
        try:
            return str(
                Promotion.from_proto(self.trainer.promote_policy(request, timeout_s=900).promotion)
            )
        except RPCError as error:
            log.error("promotion_failed", run_id=self.run_id, error=str(error))
            return f"not promoted: the trainer answered {error.code.name}: {error.message}"

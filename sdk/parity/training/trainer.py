"""The front door: an agent, its tasks and a model in; a trained, exported model out.

    result = parity.train(solve, "tasks.jsonl", val_tasks="val.jsonl", steps=30)

`Trainer` is the same run a step at a time, for callers that want to drive it:

    with parity.Trainer(solve, "tasks.jsonl", steps=30) as trainer:
        trainer.validate()
        while not trainer.done:
            print(trainer.step().reward)
        result = trainer.finish()

Starting a run brings up the local stack (`parity up`, in RUN_DIR/stack) unless a
deployed one is named, starts the trainer's run, and then, step by step, rolls each
batch's tasks out through the agent engine (from_store: adopts stored sessions instead,
store_supply) while watching the trainer: a run that fails, or a stack that goes down,
ends the wait at once with the reason and the checkpoint to resume from. Nothing here
trains; the trainer service does, on what the assembler builds from the captured calls.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog

from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import AssemblerClient, RPCError, StoreClient, TrainerClient
from parity.config import current_config
from parity.core.progress import Progress, show_progress
from parity.core.update_settings import to_run_config
from parity.engine.runner import Agent
from parity.services.inference.packaged_models import is_model_name
from parity.services.stack import StackError
from parity.training import tracking
from parity.training.batch_supply import BatchSupply, rollout_results
from parity.training.local_stack import served_model
from parity.training.model_choice import choose_model
from parity.training.result import StepResult, TrainResult
from parity.training.rollout_runner import RolloutRunner, Sampling
from parity.training.run_checkpoints import (
    CHECKPOINTS_DIR,
    default_export_dir,
    latest_checkpoint_id,
    resume_checkpoint,
)
from parity.training.run_control import POLL_S, RewardsSaturated, RunControl, RunEnded
from parity.training.run_inputs import (
    SETTINGS_FILE,
    Tasks,
    keep_given_tasks,
    named_inputs,
    resolve_inputs,
    resolve_settings,
    run_folder,
)
from parity.training.run_report import RunOutcome, progress_postfix, train_result
from parity.training.run_stack import RunStack
from parity.training.settings import SettingsError, TrainSettings
from parity.training.store_supply import StoreExhausted, StoreSupply
from parity.training.task_order import TaskOrder
from parity.training.teacher_server import SERVED_NAME
from parity.training.validation import RolloutScorer, ValidationResult, summarize

log = structlog.get_logger(__name__)


class Trainer:
    def __init__(
        self,
        agent: Agent | str | None = None,
        tasks: Tasks | None = None,
        *,
        val_tasks: Tasks | None = None,
        settings: TrainSettings | None = None,
        **values: Any,
    ) -> None:
        """Check everything before anything starts: settings, tasks, the agent. `values` are
        TrainSettings fields over `settings`; with `resume`, over the run's saved settings."""
        self.settings = resolve_settings(settings, values | named_inputs(agent, tasks, val_tasks))
        self.agent, self.tasks, self.val_tasks = resolve_inputs(agent if callable(agent) else None, tasks, val_tasks,
                                                                self.settings)  # fmt: skip
        self.run_id, self.run_dir = run_folder(self.settings)
        self.model = choose_model(self.settings)
        self.settings = self.settings.replace(
            learning_rate=self.model.learning_rate, max_tokens=self.model.max_tokens
        )
        self.total_steps = self.settings.total_steps(len(self.tasks))
        self.step_index = 0
        self.started_step = 0
        self.validations: list[ValidationResult] = []
        self.steps: list[StepResult] = []
        self._stack = RunStack()
        self._runner: RolloutRunner | None = None
        self._supply: BatchSupply | StoreSupply | None = None
        self._tracker: tracking.Tracker | None = None
        self._control: RunControl | None = None
        self._assembler: AssemblerClient | None = None
        self._task_order = TaskOrder(
            self.tasks, self.settings.seed, by_signal=self.settings.task_selection == "signal"
        )
        self._served_model = ""
        self._started = time.monotonic()
        self.state = "created"
        self.error = ""
        self.stopped_early = ""  # why the run completed before its last step, when it did

    # ----- lifecycle

    def __enter__(self) -> Trainer:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if isinstance(error, KeyboardInterrupt):
            self.stop()
        self.close()

    def start(self) -> None:
        """Bring up (or reach) the stack and start, or resume, the trainer's run."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        addresses = self._stack.open(
            self.settings, self.run_dir, self.model.folder, self.model.teacher
        )
        self._control = RunControl(TrainerClient(addresses.trainer), self.run_id, self._stack.local)
        self._assembler = AssemblerClient(addresses.assembler)
        self._served_model = served_model(addresses.ingest_url, current_config().api_key)
        resume_from = (
            resume_checkpoint(self._control, self.run_dir, self.run_id, embedded=self._stack.embedded)
            if self.settings.resume else None
        )  # fmt: skip
        self.started_step = self.step_index = resume_from.step if resume_from else 0
        if self.step_index >= self.total_steps:
            raise SettingsError(
                "steps",
                f"run {self.run_id} is at step {self.step_index}; raise steps above it to resume",
            )
        self.settings = keep_given_tasks(self.settings, self.run_dir, self.tasks, self.val_tasks)
        saved = self._saved_settings()
        (self.run_dir / SETTINGS_FILE).write_text(json.dumps(saved, indent=2) + "\n")
        self._tracker = tracking.open_tracker(self.run_dir, self.run_id, self.step_index if resume_from else None,
                                              self.settings.wandb, self.settings.wandb_mode, saved)  # fmt: skip
        # A resumed run continues the task order where its checkpoint left it.
        if self.tasks:
            self._task_order.skip(self.step_index * self.settings.groups_per_batch)
        request = trainer_pb.StartRunRequest(config=self._run_config())
        if resume_from is not None:
            request.resume_checkpoint_id = resume_from.checkpoint_id
        else:
            request.run_id = self.run_id
        with self._noting_the_end():
            run = self._control.start(request)
        # One of several runs on the stack's base model: its agents ask for its own adapter.
        self._served_model = run.served_model or self._served_model
        if self.agent is not None:
            self._runner = RolloutRunner.for_run(
                self.agent, self._assembler, self.run_id, self.settings
            )
        if self.settings.from_store:
            control = self._control
            self._supply = StoreSupply(StoreClient(addresses.store), self._assembler, self.settings, self.run_id,
                                       lambda: control.status().run.policy_version, self._raise_if_ended)  # fmt: skip
        else:
            assert self._runner is not None
            self._supply = BatchSupply(self._runner, self._assembler, self._task_order, self.settings, self.run_id,
                                       self._served_model)  # fmt: skip
        self.state = "running"
        log.info("run_started", run_id=self.run_id, run_dir=str(self.run_dir), steps=self.total_steps,
                 resumed_at=self.step_index if resume_from else None)  # fmt: skip

    @property
    def done(self) -> bool:
        return self.step_index >= self.total_steps or self.state in ("failed", "stopped")

    def step(self) -> StepResult:
        """Roll out one batch of tasks and wait until the trainer has trained on it and synced vLLM."""
        target = self.step_index + 1
        if target > self.total_steps:
            raise RuntimeError(f"the run has done all {self.total_steps} steps")
        self._require_running()
        supply, control = self._supply, self._control
        assert supply is not None and control is not None
        futures: list[Any] = supply.begin(target)
        idle_since: float | None = None
        while True:
            status = control.status()
            run = status.run
            # The trainer counts a step before its weight sync; the step is done once that sync is.
            if run.step > target or (
                run.step == target
                and run.state not in (run_pb2.RUN_STATE_SYNCING, run_pb2.RUN_STATE_FAILED)
            ):
                break
            with self._noting_the_end():
                control.raise_if_ended(status, futures)
            supply.raise_if_agent_failing(futures, target)
            if self.settings.rollout_mode == "async" or not any(not f.done() for f in futures):
                idle_since = supply.top_up(futures, status, idle_since, target)
            time.sleep(POLL_S)
        # Sync mode: the batch is trained, so rollouts still running are surplus of this step and
        # will feed the next. Their results still count as this step's.
        failed = sum(r.outcome != "succeeded" for f in futures if f.done() and not f.cancelled()
                     for r in rollout_results(f))  # fmt: skip
        values = control.step_metrics(target)
        values["failed_rollouts"] = float(failed)
        values |= supply.step_values()
        self.step_index = target
        result = StepResult(target, values, failed)
        self.steps.append(result)
        self._track("train", target, values)
        return result

    def validate(self) -> ValidationResult | None:
        """The agent on every validation task, val_samples times, not trained on. None without val_tasks."""
        if not self.val_tasks:
            return None
        runner = self._require_running()
        assert runner is not None, "validation tasks come with an agent"
        sampling = Sampling(
            self._served_model,
            self.settings.validation_max_tokens,
            self.settings.validation_temperature,
        )
        future = runner.submit(self.val_tasks, prefix=f"{self.run_id}-v{self.step_index:05d}",
                               rollouts_per_task=self.settings.val_samples, sampling=sampling, validation=True)  # fmt: skip
        assert self._control is not None
        with self._noting_the_end():
            self._control.wait_for(future, stopped_here=bool(self.stopped_early))
        assert self._assembler is not None
        scorer = RolloutScorer(self._assembler, self.settings.val_trajectory)
        result = summarize(self.step_index, future.result(), self.settings.val_pass_threshold,
                           self.settings.val_samples, scorer)  # fmt: skip
        self.validations.append(result)
        self._track("validation", self.step_index, result.values())
        return result

    def train(self) -> TrainResult:
        """Validate, train every step (validating every val_every), validate, export; returns the result."""
        # A bar on a terminal; in a log, one line per step and per validation.
        progress = show_progress(total=self.total_steps, initial=self.step_index, desc=f"training {self.run_id}",
                                 unit="step", enabled=self.settings.progress, file=sys.stderr)  # fmt: skip
        try:
            self._show(progress, self.validate())
            try:
                while not self.done:
                    step = self.step()
                    progress.update(1)
                    every = self.settings.val_every
                    validation = (
                        self.validate()
                        if every and step.step % every == 0 and step.step < self.total_steps
                        else None
                    )
                    self._show(progress, validation, step)
            except (RewardsSaturated, StoreExhausted) as ended:
                if ended.state != "completed":
                    raise
                self._end_early(ended)
            else:
                self._wait_for_end()
            self._show(progress, self.validate())
        finally:
            progress.close()
        return self.finish()

    def finish(self) -> TrainResult:
        """Export the trained policy (when asked), write the plot, and say how the run went."""
        exported = promotion = ""
        if self.state == "running" and (self.step_index >= self.total_steps or self.stopped_early):
            if not self.stopped_early:
                self._wait_for_end()
            self.state = "completed"
            exported = self.export() if self.settings.export else ""
            if self.settings.promote and self._control is not None:
                promotion = self._control.promote(
                    self.settings.promote_metric,
                    self.settings.promote_margin,
                    self.settings.promote_model,
                )
        return self._result(exported, promotion)

    def export(self, output_dir: str | Path | None = None) -> str:
        """Write the latest checkpoint's policy as a Hugging Face model folder; returns its path
        (on the trainer's machine, for a deployed stack). A LoRA run writes its adapter there, and
        with lora_merge the merged model to PATH/merged, whose path it returns."""
        assert self._control is not None, "start() the run first"
        target = (
            str(output_dir)
            if output_dir
            else default_export_dir(self._control, self.run_dir, self._stack.embedded)
        )
        return self._control.export(target, self.settings.lora_merge)

    def stop(self) -> None:
        """Stop the run now, checkpointed and resumable (what Ctrl-C does)."""
        if self._runner is not None:
            self._runner.cancel_all()
        if self._control is not None and self.state == "running":
            try:
                self._control.trainer.stop_run(
                    trainer_pb.StopRunRequest(run_id=self.run_id), timeout_s=900
                )
            except RPCError as error:
                log.error("stop_run_failed", error=str(error))
            self.state = "stopped"

    def _end_early(self, ended: RunEnded) -> None:
        """Stop the trainer's run at its last step, checkpointed; the driver still validates and exports."""
        assert self._control is not None
        log.info("run_ending_early", run_id=self.run_id, step=self.step_index, reason=str(ended))
        if self._runner is not None:
            self._runner.cancel_all()
        stopped = self._control.trainer.stop_run(
            trainer_pb.StopRunRequest(run_id=self.run_id), timeout_s=900
        )
        # The trainer may have trained one more step meanwhile (a short batch of the sessions this step adopted):
        # the last validation, the export and the gate go with the checkpoint the stop saved.
        self.step_index = max(self.step_index, stopped.run.step)
        self.stopped_early = str(ended)

    def fail(self, error: BaseException) -> TrainResult:
        """The result of a run that ended on `error` (a failed run, a stack that went down); a trainer run
        still going is stopped first, so it leaves a checkpoint to resume from."""
        self.stop()
        self.state = getattr(error, "state", "failed")
        self.error = str(error)
        return self._result("")

    def close(self) -> None:
        """Stop the rollouts, the trackers and the local stack; restore the SDK's settings."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._tracker is not None:
            self._tracker.close()
            self._tracker = None
        self._stack.close()

    # ----- the stack and the run

    @property
    def model_path(self) -> str:
        return str(self.model.folder)

    def _run_config(self) -> run_pb2.RunConfig:
        # Embedded, checkpoints live in the run folder; a deployed trainer keeps them in its work dir.
        checkpoint_dir = str(self.run_dir / CHECKPOINTS_DIR) if self._stack.embedded else ""
        config = to_run_config(self.settings, model_path=self.model_path, total_steps=self.total_steps,
                               checkpoint_dir=checkpoint_dir)  # fmt: skip
        local = self._stack.local
        if local is not None and local.teacher is not None:
            config.teacher.CopyFrom(run_pb2.TeacherConfig(url=local.teacher_url, model=SERVED_NAME))
        return config

    @contextlib.contextmanager
    def _noting_the_end(self) -> Iterator[None]:
        """A run the trainer ended (failed, or stopped elsewhere) leaves its state here as it is raised."""
        try:
            yield
        except RunEnded as ended:
            self.state = ended.state
            raise

    def _raise_if_ended(self) -> None:
        assert self._control is not None
        with self._noting_the_end():
            self._control.raise_if_ended(self._control.status(), [])

    def _wait_for_end(self) -> None:
        assert self._control is not None
        with self._noting_the_end():
            self._control.wait_for_end()

    # ----- output

    def _track(self, kind: str, step: int, values: dict[str, float]) -> None:
        if self._tracker is not None:
            self._tracker.record(kind, step, values)
        if kind == "validation" and self._control is not None:
            self._control.record_validation(step, values)

    def _saved_settings(self) -> dict[str, Any]:
        return self.settings.replace(run_id=self.run_id, resume="").to_json()

    def _result(self, exported: str, promotion: str = "") -> TrainResult:
        outcome = RunOutcome(
            run_id=self.run_id, state=self.state, steps=self.step_index, error=self.error, run_dir=self.run_dir,
            model_path=self.model_path, exported=exported, checkpoint=latest_checkpoint_id(self._control),
            wall_seconds=round(time.monotonic() - self._started, 1), stopped_early=self.stopped_early, promotion=promotion,
        )  # fmt: skip
        return train_result(outcome, self.settings, self._tracker)

    def _show(
        self,
        progress: Progress,
        validation: ValidationResult | None,
        step: StepResult | None = None,
    ) -> None:
        last = validation or (self.validations[-1] if self.validations else None)
        progress.set_postfix(progress_postfix(self.settings, self.steps, step, last), refresh=True)

    def _require_running(self) -> RolloutRunner | None:
        """The rollout runner (None for a from-store run without an agent); raises unless the run is running."""
        if self._supply is None or self.state != "running":
            raise RuntimeError("the run is not running: start() it first")
        return self._runner


def train(
    agent: Agent | str | None = None,
    tasks: Tasks | None = None,
    *,
    val_tasks: Tasks | None = None,
    model: str | Path | None = None,
    settings: TrainSettings | None = None,
    **values: Any,
) -> TrainResult:
    """Train `agent` on `tasks`; the keywords are TrainSettings fields. Returns how the run went;
    a run that fails or is stopped returns too (state and error say so), with its checkpoint."""
    if model is not None:
        values["model"] = str(model) if is_model_name(str(model)) else str(Path(model).resolve())
    trainer = Trainer(agent, tasks, val_tasks=val_tasks, settings=settings, **values)
    try:
        trainer.start()
        return trainer.train()
    except KeyboardInterrupt as interrupt:
        trainer.stop()
        return trainer.fail(
            RunEnded(
                "stopped", str(interrupt) or "stopped by the user (Ctrl-C)", trainer.step_index
            )
        )
    except (RunEnded, StackError, RPCError) as error:
        return trainer.fail(error)
    finally:
        trainer.close()

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
batch's tasks out through the agent engine while watching the trainer: a run that
fails, or a stack that goes down, ends the wait at once with the reason and the
checkpoint to resume from. Nothing here trains; the trainer service does, on what
the assembler builds from the captured calls.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import random
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
import httpx
import structlog

import parity
from parity import transport
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import AssemblerClient, RPCError, TrainerClient
from parity.engine import RolloutResult
from parity.engine.runner import Agent
from parity.progress import Progress, show_progress
from parity.services.inference.packaged_models import DEFAULT_MODEL, is_model_name
from parity.training import tracking
from parity.training.agents import CommandAgent, load_callable, parse_command
from parity.training.local_stack import LocalStack, StackError
from parity.training.model_choice import choose_model
from parity.training.plateau import flat_reward_warning
from parity.training.plot import plot_rewards
from parity.training.result import StepResult, TrainResult
from parity.training.rollout_runner import RolloutRunner, Sampling
from parity.training.settings import SettingsError, StackAddresses, TrainSettings
from parity.training.tasks import load_tasks, tasks_from_objects
from parity.training.validation import RolloutScorer, ValidationResult, summarize

log = structlog.get_logger(__name__)

SETTINGS_FILE = "settings.json"
PLOT_FILE = "reward.png"
MODEL_DIR = "model"
POLL_S = 0.2
# A batch can come up short when the assembler drops a group (all rewards equal, or
# every rollout failed); once rollouts are done and the batch is still short for this
# long, more tasks top it up.
TOP_UP_IDLE_S = 2.0
METRICS_TIMEOUT_S = 30.0
# How long the trainer may go without answering a status poll in time before the run fails on it.
STATUS_PATIENCE_S = 300.0
# Tasks a step may add to make up for dropped groups, per group it needs: past that the rewards do not
# vary within groups (a task too hard or too easy for the model, or a constant reward), and the run says so.
MAX_TOP_UPS_PER_GROUP = 8
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


class Trainer:
    def __init__(
        self,
        agent: Agent | str | None = None,
        tasks: str | Path | Sequence[Mapping[str, Any]] | None = None,
        *,
        val_tasks: str | Path | Sequence[Mapping[str, Any]] | None = None,
        settings: TrainSettings | None = None,
        **values: Any,
    ) -> None:
        """Check everything before anything starts: settings, tasks, the agent. `values` are
        TrainSettings fields over `settings`; with `resume`, over the run's saved settings."""
        if isinstance(agent, str):
            values["agent"] = agent
        for name, given in (("tasks", tasks), ("val_tasks", val_tasks)):
            # An empty string is "none" (no validation), not the current directory.
            if isinstance(given, Path) or (isinstance(given, str) and given):
                values[name] = str(Path(given).resolve())
            elif given == "":
                values[name] = ""
        self.settings = _resolve_settings(settings, values)
        self.agent = _resolve_agent(agent if callable(agent) else None, self.settings)
        self.tasks = _resolve_tasks(tasks, self.settings.tasks, "tasks")
        self.val_tasks = _resolve_tasks(val_tasks, self.settings.val_tasks, "val_tasks", required=False)
        self.run_id = self.settings.resume or self.settings.run_id or _new_run_id()
        self.run_dir = Path(self.settings.output_dir).resolve() / self.run_id
        if not self.settings.resume and (self.run_dir / SETTINGS_FILE).exists():
            raise SettingsError("run_id", f"{self.run_dir} already holds run {self.run_id}; resume it or name another")
        self.model = choose_model(self.settings)
        self.settings = self.settings.replace(learning_rate=self.model.learning_rate, max_tokens=self.model.max_tokens)
        self.total_steps = self.settings.total_steps(len(self.tasks))
        self.step_index = 0
        self.started_step = 0
        self.validations: list[ValidationResult] = []
        self.steps: list[StepResult] = []
        self._stack: LocalStack | None = None
        self._runner: RolloutRunner | None = None
        self._tracker: tracking.Tracker | None = None
        self._trainer: TrainerClient | None = None
        self._assembler: AssemblerClient | None = None
        self._previous_config = parity.current_config()
        self._previous_security = transport.process_security()
        self._task_order = self._task_stream()
        self._served_model = ""
        self._last_status: trainer_pb.GetStatusResponse | None = None
        self._last_status_at = 0.0
        self._failures_in_a_row = 0
        self._topped_up = 0
        self._last_failure = ""
        self._started = time.monotonic()
        self.state = "created"
        self.error = ""

    # ----- lifecycle

    def __enter__(self) -> Trainer:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if isinstance(error, KeyboardInterrupt):
            self.stop()
        self.close()

    def start(self) -> None:
        """Bring up (or reach) the stack and start, or resume, the trainer's run."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        addresses = self._bring_up_stack()
        # The local stack authenticates every call: the driver starts runs (admin), its agents call as agents.
        credentials = {"token": self._stack.token("admin"), "api_key": self._stack.token("agent")} if self._stack else {}
        parity.configure(ingest_url=addresses.ingest_url, assembler_address=addresses.assembler,
                         **({"store_address": addresses.store} if addresses.store else {}), **credentials)  # fmt: skip
        self._trainer = TrainerClient(addresses.trainer)
        self._assembler = AssemblerClient(addresses.assembler)
        self._served_model = _served_model(addresses.ingest_url)
        resume_from = self._resume_checkpoint() if self.settings.resume else None
        self.started_step = self.step_index = resume_from.step if resume_from else 0
        if self.step_index >= self.total_steps:
            raise SettingsError("steps", f"run {self.run_id} is at step {self.step_index}; raise steps above it to resume")
        self._keep_given_tasks()
        (self.run_dir / SETTINGS_FILE).write_text(json.dumps(self._saved_settings(), indent=2) + "\n")
        self._tracker = self._open_tracker(keep_through_step=self.step_index if resume_from else None)
        self._skip_consumed_tasks()
        request = trainer_pb.StartRunRequest(config=self._run_config())
        if resume_from is not None:
            request.resume_checkpoint_id = resume_from.checkpoint_id
        else:
            request.run_id = self.run_id
        self._trainer.start_run(request)
        self._runner = RolloutRunner(
            self.agent, self._assembler, run_id=self.run_id, concurrency=self.settings.rollout_concurrency,
            timeout_s=self.settings.rollout_timeout_s, retries=self.settings.retries,
            history_mode=self.settings.history_mode,
        )  # fmt: skip
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
        runner = self._require_running()
        futures = [self._roll_out(runner, self._take_tasks(self.settings.groups_per_batch), target)]
        self._topped_up = 0
        idle_since: float | None = None
        while True:
            status = self._status()
            run = status.run
            # The trainer counts a step before its weight sync; the step is done once that sync is.
            if run.step > target or (run.step == target and run.state not in (run_pb2.RUN_STATE_SYNCING, run_pb2.RUN_STATE_FAILED)):
                break
            self._raise_if_ended(status, futures)
            self._raise_if_agent_failing(futures)
            if self.settings.mode == "async" or not any(not f.done() for f in futures):
                idle_since = self._top_up(runner, futures, status, idle_since, target)
            time.sleep(POLL_S)
        # Sync mode: the batch is trained, so rollouts still running are surplus of this step and
        # will feed the next. Their results still count as this step's.
        failed = sum(r.outcome != "succeeded" for f in futures if f.done() and not f.cancelled()
                     for r in _results(f))  # fmt: skip
        values = self._step_metrics(target)
        values["failed_rollouts"] = float(failed)
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
        sampling = Sampling(self._served_model, self.settings.validation_max_tokens, self.settings.validation_temperature)
        future = runner.submit(self.val_tasks, prefix=f"{self.run_id}-v{self.step_index:05d}",
                               rollouts_per_task=self.settings.val_samples, sampling=sampling, validation=True)  # fmt: skip
        while not future.done():
            self._raise_if_ended(self._status(), [future], expect_complete=True)
            time.sleep(POLL_S)
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
            while not self.done:
                step = self.step()
                progress.update(1)
                every = self.settings.val_every
                validation = self.validate() if every and step.step % every == 0 and step.step < self.total_steps else None
                self._show(progress, validation, step)
            self._wait_for_end()
            self._show(progress, self.validate())
        finally:
            progress.close()
        return self.finish()

    def finish(self) -> TrainResult:
        """Export the trained policy (when asked), write the plot, and say how the run went."""
        exported = ""
        if self.state == "running" and self.step_index >= self.total_steps:
            self._wait_for_end()
            self.state = "completed"
            if self.settings.export:
                exported = self.export()
        return self._result(exported)

    def export(self, output_dir: str | Path | None = None) -> str:
        """Write the latest checkpoint's policy as a Hugging Face model folder; returns its path
        (on the trainer's machine, for a deployed stack). A LoRA run writes its adapter there, and
        with lora_merge the merged model to PATH/merged, whose path it returns."""
        assert self._trainer is not None, "start() the run first"
        target = str(output_dir) if output_dir else self._default_export_dir()
        request = trainer_pb.ExportPolicyRequest(output_dir=target, merge_lora=self.settings.lora_merge)
        response = self._trainer.export_policy(request, timeout_s=600)
        log.info("policy_exported", path=response.path, merged=response.merged_path,
                 checkpoint=response.checkpoint.checkpoint_id)  # fmt: skip
        return response.merged_path or response.path

    def stop(self) -> None:
        """Stop the run now, checkpointed and resumable (what Ctrl-C does)."""
        if self._runner is not None:
            self._runner.cancel_all()
        if self._trainer is not None and self.state == "running":
            try:
                self._trainer.stop_run(trainer_pb.StopRunRequest(), timeout_s=900)
            except RPCError as error:
                log.error("stop_run_failed", error=str(error))
            self.state = "stopped"

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
        if self._stack is not None:
            self._stack.stop()
            self._stack = None
        previous = self._previous_config
        parity.configure(ingest_url=previous.ingest_url, assembler_address=previous.assembler_address,
                         store_address=previous.store_address, api_key=previous.api_key)  # fmt: skip
        transport.set_process_security(self._previous_security)

    # ----- the stack and the run

    def _bring_up_stack(self) -> StackAddresses:
        if self.settings.stack is not None:
            return self.settings.stack
        self._stack = LocalStack.for_run(self.run_dir / "stack", self.settings, self.model.folder)
        print(f"starting the local stack (logs in {self._stack.log_dir})", file=sys.stderr, flush=True)
        self._stack.start(self.settings.startup_timeout_s)
        print(f"console: {self._stack.console_url} (the run, its batches, every trajectory)", file=sys.stderr, flush=True)
        return self._stack.addresses

    @property
    def model_path(self) -> str:
        return str(self.model.folder)

    def _run_config(self) -> run_pb2.RunConfig:
        s = self.settings
        return run_pb2.RunConfig(
            model_path=self.model_path, total_steps=self.total_steps, groups_per_batch=s.groups_per_batch,
            learning_rate=s.learning_rate, clip_ratio=s.clip_ratio, kl_coef=s.kl_coef, max_policy_lag=s.max_policy_lag,
            advantage_estimator=run_pb2.AdvantageEstimator.Value(f"ADVANTAGE_ESTIMATOR_{s.advantage_estimator.upper()}"),
            rollout_mode=run_pb2.RolloutMode.Value(f"ROLLOUT_MODE_{s.mode.upper()}"),
            backend=0 if s.backend == "auto" else run_pb2.TrainingBackend.Value(f"TRAINING_BACKEND_{s.backend.upper()}"),
            # Embedded, checkpoints live in the run folder; a deployed trainer keeps them in its work dir.
            checkpoint_dir=str(self.run_dir / "checkpoints") if self._stack is not None else "",
            checkpoint_interval=s.checkpoint_interval,
            overrides={"ppo_epochs": str(s.ppo_epochs), "max_grad_norm": str(s.max_grad_norm), "seed": str(s.seed),
                       "dtype": s.dtype,
                       **({"ray_workers_per_node": str(s.ray_workers_per_node), "ray_nodes": str(s.ray_nodes)}
                          if s.ray_workers_per_node else {})},
            lora=run_pb2.LoraConfig(rank=s.lora_rank, alpha=s.lora_alpha, target_modules=s.lora_modules,
                                    dropout=s.lora_dropout) if s.lora_rank else None,
        )  # fmt: skip

    def _resume_checkpoint(self) -> run_pb2.Checkpoint:
        assert self._trainer is not None
        request = trainer_pb.ListCheckpointsRequest(run_id=self.run_id, page_size=1)
        if self._stack is None:
            found = self._trainer.list_checkpoints(request).checkpoints
        else:
            # The embedded trainer started with no run, so it looks under its own work dir; ask for the run's folder.
            found = _local_checkpoints(self.run_dir / "checkpoints", self.run_id)
        if not found:
            raise SettingsError("resume", f"run {self.run_id} has no checkpoint to resume from")
        return found[0]

    def _status(self) -> trainer_pb.GetStatusResponse:
        """The trainer's status. An answer past its deadline is not a failure while the last one is recent: a
        trainer in the middle of a step on a loaded host can be slow to answer (seen: 30 s at a load of 70 on
        2 cores), and the run's state cannot have changed unseen, since the next poll reads it."""
        assert self._trainer is not None
        if self._stack is not None:
            self._stack.raise_if_down()
        try:
            status = self._trainer.get_status(trainer_pb.GetStatusRequest())
        except RPCError as error:
            late = error.code == grpc.StatusCode.DEADLINE_EXCEEDED and self._last_status is not None
            if not late or time.monotonic() - self._last_status_at > STATUS_PATIENCE_S:
                raise
            log.warning("trainer_status_late", error=str(error))
            return self._last_status
        self._last_status, self._last_status_at = status, time.monotonic()
        return status

    def _raise_if_ended(
        self, status: trainer_pb.GetStatusResponse, futures: Sequence[concurrent.futures.Future[Any]],
        expect_complete: bool = False,
    ) -> None:  # fmt: skip
        state = TERMINAL.get(status.run.state)
        if state is None or (state == "completed" and expect_complete):
            for future in futures:
                if future.done() and not future.cancelled() and future.exception() is not None:
                    raise future.exception()  # type: ignore[misc]
            return
        for future in futures:
            future.cancel()
        self.state = state
        message = status.run.error_message or f"the run was {state} at step {status.run.step}"
        raise RunEnded(state, message, status.run.step)

    def _wait_for_end(self) -> None:
        """After the last step: until the trainer has saved the final checkpoint and the plot."""
        while True:
            status = self._status()
            if status.run.state in TERMINAL:
                if status.run.state != run_pb2.RUN_STATE_COMPLETED:
                    self._raise_if_ended(status, [])
                return
            time.sleep(POLL_S)

    def _top_up(
        self, runner: RolloutRunner, futures: list[concurrent.futures.Future[list[RolloutResult]]],
        status: trainer_pb.GetStatusResponse, idle_since: float | None, target: int,
    ) -> float | None:  # fmt: skip
        """One more task when the trainer waits and nothing is pending or running; returns the idle clock."""
        assert self._assembler is not None
        waiting = status.run.state == run_pb2.RUN_STATE_WAITING_FOR_DATA
        running = any(not f.done() for f in futures)
        if self.settings.mode == "async":
            pending = self._pending_groups()
            if not running and pending < self.settings.groups_per_batch:
                futures.append(self._roll_out(runner, self._take_tasks(self.settings.groups_per_batch), target))
            return None
        if not waiting or running:
            return None
        # Every rollout has closed, so every pending group is complete: it is short only of groups a filter dropped.
        missing = self.settings.groups_per_batch - self._pending_groups()
        if missing <= 0:
            return None
        now = time.monotonic()
        if idle_since is None:
            return now
        if now - idle_since >= TOP_UP_IDLE_S:
            if self._topped_up >= MAX_TOP_UPS_PER_GROUP * self.settings.groups_per_batch:
                raise AgentFailing("failed", self._no_batch_message(), self.step_index)
            self._topped_up += missing
            futures.append(self._roll_out(runner, self._take_tasks(missing), target))
            return None
        return idle_since

    def _no_batch_message(self) -> str:
        assert self._assembler is not None
        dropped = dict(self._assembler.get_stats(assembler_pb.GetStatsRequest()).filtered_counts)
        return (f"no batch for step {self.step_index + 1} after {self._topped_up} extra tasks: the assembler dropped "
                f"their groups ({', '.join(f'{k}: {v}' for k, v in sorted(dropped.items())) or 'nothing counted'}). "
                "Rewards must vary within a task's rollouts: give easier tasks or partial credit, raise "
                "rollouts_per_task, or check the reward.")  # fmt: skip

    def _pending_groups(self) -> int:
        assert self._assembler is not None
        return self._assembler.get_stats(assembler_pb.GetStatsRequest(run_id=self.run_id)).pending_group_count

    def _roll_out(self, runner: RolloutRunner, tasks: list[dict[str, Any]], step: int) -> concurrent.futures.Future[list[RolloutResult]]:
        sampling = Sampling(self._served_model, self.settings.max_tokens, self.settings.temperature)
        prefix = f"{self.run_id}-s{step:05d}-{secrets.token_hex(2)}"
        future = runner.submit(tasks, prefix=prefix, rollouts_per_task=self.settings.rollouts_per_task, sampling=sampling)
        future.add_done_callback(self._count_failures)
        return future

    def _count_failures(self, future: concurrent.futures.Future[list[RolloutResult]]) -> None:
        for result in _results(future) if not future.cancelled() else []:
            final = result.attempt == self.settings.retries or result.outcome == "succeeded"
            if result.outcome == "succeeded":
                self._failures_in_a_row = 0
            elif final:
                self._failures_in_a_row += 1
                self._last_failure = result.error

    def _raise_if_agent_failing(self, futures: Sequence[concurrent.futures.Future[Any]]) -> None:
        """A whole batch's worth of rollouts failed in a row: no batch can form, so say why and end."""
        limit = self.settings.groups_per_batch * self.settings.rollouts_per_task
        if self._failures_in_a_row >= limit:
            for future in futures:
                future.cancel()
            raise AgentFailing("failed", f"the agent failed {self._failures_in_a_row} rollouts in a row; "
                                         f"the last: {self._last_failure}", self.step_index)  # fmt: skip

    def _step_metrics(self, step: int) -> dict[str, float]:
        assert self._trainer is not None
        request = trainer_pb.StreamMetricsRequest(from_step=step)
        try:
            for response in self._trainer.stream_metrics(request, timeout_s=METRICS_TIMEOUT_S):
                if response.metrics.step == step:
                    return dict(response.metrics.values)
        except RPCError as error:
            log.warning("step_metrics_unavailable", step=step, error=str(error))
        return {}

    # ----- tasks

    def _task_stream(self) -> Iterator[dict[str, Any]]:
        """The tasks epoch after epoch, each epoch in a new order drawn from the seed."""
        rng = random.Random(self.settings.seed)
        while True:
            order = list(self.tasks)
            rng.shuffle(order)
            yield from order

    def _take_tasks(self, count: int) -> list[dict[str, Any]]:
        return [next(self._task_order) for _ in range(count)]

    def _keep_given_tasks(self) -> None:
        """Tasks handed over as objects are written into the run folder, so a resume finds them."""
        for name, tasks in (("tasks", self.tasks), ("val_tasks", self.val_tasks)):
            if tasks and not getattr(self.settings, name):
                path = self.run_dir / f"{name}.jsonl"
                path.write_text("".join(json.dumps(task, default=str) + "\n" for task in tasks))
                self.settings = self.settings.replace(**{name: str(path)})

    def _skip_consumed_tasks(self) -> None:
        """A resumed run continues the task order where its checkpoint left it."""
        for _ in range(self.step_index * self.settings.groups_per_batch):
            next(self._task_order)

    # ----- output

    def _open_tracker(self, keep_through_step: int | None) -> tracking.Tracker:
        jsonl = tracking.JsonlSink(self.run_dir / tracking.METRICS_FILE, keep_through_step)
        others: list[tracking.MetricSink] = [tracking.TensorBoardSink(self.run_dir / tracking.TENSORBOARD_DIR)]
        if self.settings.wandb:
            others.append(tracking.WandbSink(self.settings.wandb, self.run_id, self.run_dir, self.settings.wandb_mode,
                                             self._saved_settings()))  # fmt: skip
        return tracking.Tracker(jsonl, others)

    def _track(self, kind: str, step: int, values: dict[str, float]) -> None:
        if self._tracker is not None:
            self._tracker.record(kind, step, values)
        if kind == "validation" and self._trainer is not None:
            self._record_validation(step, values)

    def _record_validation(self, step: int, values: dict[str, float]) -> None:
        """The trainer keeps it beside the run's steps, for readers like the console; the run goes on without."""
        assert self._trainer is not None
        request = trainer_pb.WriteValidationMetricsRequest(run_id=self.run_id, step=step, values=values)
        try:
            self._trainer.write_validation_metrics(request)
        except RPCError as error:
            log.warning("validation_not_recorded", run_id=self.run_id, step=step, error=str(error))

    def _saved_settings(self) -> dict[str, Any]:
        return self.settings.replace(run_id=self.run_id, resume="").to_json()

    def _default_export_dir(self) -> str:
        if self._stack is not None:
            return str(self.run_dir / MODEL_DIR)
        assert self._trainer is not None
        # A deployed trainer writes on its own machine, beside the run's checkpoints.
        latest = self._trainer.list_checkpoints(trainer_pb.ListCheckpointsRequest(run_id=self.run_id, page_size=1))
        return str(Path(latest.checkpoints[0].path).parent / MODEL_DIR) if latest.checkpoints else ""

    def _result(self, exported: str) -> TrainResult:
        records = self._tracker.records("train") if self._tracker else []
        train = [r for r in records if r.step > 0]
        window = max(1, min(5, len(train) // 3))
        rewards = [r.values.get("reward_mean") for r in train if r.values.get("reward_mean") is not None]
        diffs = [r.values["sync_max_logprob_diff"] for r in train if "sync_max_logprob_diff" in r.values]
        validation_records = self._tracker.records("validation") if self._tracker else []
        validation = [(r.step, r.values.get("reward", math.nan)) for r in validation_records]
        plot = ""
        if train:
            plot = str(plot_rewards([r.step for r in train], [r.values for r in train], self.run_dir / PLOT_FILE,
                                    f"{self.run_id}: reward and loss per step", validation))  # fmt: skip
        checkpoint = self._latest_checkpoint()
        resumable = self.state in ("failed", "stopped") and checkpoint
        return TrainResult(
            run_id=self.run_id, state=self.state if self.state != "running" else "stopped", steps=self.step_index,
            error=self.error, reward_first=_mean(rewards[:window]), reward_last=_mean(rewards[-window:]),
            val_reward_before=validation[0][1] if validation else None,
            val_reward_after=validation[-1][1] if len(validation) > 1 else None,
            val_pass_before=_pass_rates(validation_records[0]) if validation_records else {},
            val_pass_after=_pass_rates(validation_records[-1]) if len(validation_records) > 1 else {},
            model=self.settings.model or DEFAULT_MODEL, learning_rate=self.settings.learning_rate,
            warning=flat_reward_warning(rewards, self.settings.learning_rate),
            max_sync_logprob_diff=max(diffs) if diffs else None, plot=plot, run_dir=str(self.run_dir),
            exported_model=exported, serve_command=self._serve_command(exported) if exported else "",
            checkpoint=checkpoint,
            resume_command=f"parity train --resume {self.run_id} --output-dir {self.run_dir.parent}" if resumable else "",
            wall_seconds=round(time.monotonic() - self._started, 1), history_mode=self.settings.history_mode,
            **_token_accounting(train),
        )  # fmt: skip

    def _serve_command(self, exported: str) -> str:
        s = self.settings
        if s.lora_rank and not s.lora_merge:
            # An adapter is served on its base model, under a name of its own.
            return f"parity vllm serve --model {self.model_path} --lora-rank {s.lora_rank} --lora-modules {self.run_id}={exported}"
        return f"parity vllm serve --model {exported}"

    def _latest_checkpoint(self) -> str:
        if self._trainer is None:
            return ""
        try:
            found = self._trainer.list_checkpoints(trainer_pb.ListCheckpointsRequest(run_id=self.run_id, page_size=1))
        except RPCError:
            return ""
        return found.checkpoints[0].checkpoint_id if found.checkpoints else ""

    def _show(self, progress: Progress, validation: ValidationResult | None, step: StepResult | None = None) -> None:
        postfix = {}
        if step is not None:
            postfix["reward"] = f"{step.reward:.3f}"
            rewards = [s.reward for s in self.steps]
            if flat_reward_warning(rewards, self.settings.learning_rate):
                postfix["note"] = f"reward flat for {len(rewards)} steps"
        last = validation or (self.validations[-1] if self.validations else None)
        if last is not None:
            postfix["val_reward"] = f"{last.reward:.3f}"
        progress.set_postfix(postfix, refresh=True)

    def _require_running(self) -> RolloutRunner:
        if self._runner is None or self.state != "running":
            raise RuntimeError("the run is not running: start() it first")
        return self._runner


def train(
    agent: Agent | str | None = None,
    tasks: str | Path | Sequence[Mapping[str, Any]] | None = None,
    *,
    val_tasks: str | Path | Sequence[Mapping[str, Any]] | None = None,
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
    except KeyboardInterrupt:
        trainer.stop()
        return trainer.fail(RunEnded("stopped", "stopped by the user (Ctrl-C)", trainer.step_index))
    except (RunEnded, StackError, RPCError) as error:
        return trainer.fail(error)
    finally:
        trainer.close()


# ----- resolving inputs, before anything starts


def _resolve_settings(settings: TrainSettings | None, values: dict[str, Any]) -> TrainSettings:
    resume = values.get("resume") or (settings.resume if settings else "")
    if resume:
        output_dir = Path(values.get("output_dir") or (settings.output_dir if settings else "runs"))
        saved = output_dir / resume / SETTINGS_FILE
        if not saved.exists():
            raise SettingsError("resume", f"no run {resume!r} in {output_dir.resolve()} (no {SETTINGS_FILE})")
        base = TrainSettings.from_json(json.loads(saved.read_text()))
        return base.replace(**(values | {"resume": resume}))
    return (settings or TrainSettings()).replace(**values) if values else (settings or TrainSettings())


def _resolve_agent(agent: Callable[..., Any] | None, settings: TrainSettings) -> Agent:
    if agent is not None:
        if settings.agent or settings.agent_command:
            raise SettingsError("agent", "an agent function was passed and one is named in the settings too")
        return agent
    if settings.agent:
        return load_callable(settings.agent, "agent")
    if settings.agent_command:
        reward = load_callable(settings.reward, "reward") if settings.reward else None
        return CommandAgent(parse_command(settings.agent_command), reward)
    raise SettingsError("agent", "name the agent: agent = pkg.module:function, or agent_command = a command to run")


def _resolve_tasks(
    given: str | Path | Sequence[Mapping[str, Any]] | None, path: str, name: str, required: bool = True
) -> list[dict[str, Any]]:
    if given is not None and not isinstance(given, str | Path):
        return tasks_from_objects(given, name)
    if path:
        return load_tasks(path)
    if required:
        raise SettingsError(name, "is required: a .jsonl or .parquet file, a datasets folder, or a list of task dicts")
    return []


def _new_run_id() -> str:
    return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _served_model(ingest_url: str) -> str:
    """The model name agents ask for: what ingest lists first."""
    try:
        models = httpx.get(f"{ingest_url}/v1/models", timeout=30,
                           headers={"Authorization": f"Bearer {parity.current_config().api_key}"}).json()["data"]  # fmt: skip
    except (httpx.HTTPError, ValueError, KeyError) as error:
        raise StackError(f"ingest at {ingest_url} lists no model: {error}") from None
    if not models:
        raise StackError(f"ingest at {ingest_url} lists no model; is a vLLM replica up behind it?")
    return str(models[0]["id"])


def _local_checkpoints(root: Path, run_id: str) -> list[run_pb2.Checkpoint]:
    found = []
    for manifest in (root / run_id).glob("step-*/checkpoint.json"):
        data = json.loads(manifest.read_text())
        found.append(run_pb2.Checkpoint(checkpoint_id=f"{run_id}/{manifest.parent.name}", run_id=run_id,
                                        step=data["step"], path=str(manifest.parent)))  # fmt: skip
    return sorted(found, key=lambda c: c.step, reverse=True)


def _results(future: concurrent.futures.Future[list[RolloutResult]]) -> list[RolloutResult]:
    return future.result() if future.exception() is None else []


def _pass_rates(record: tracking.MetricRecord) -> dict[str, float]:
    return {key: value for key, value in record.values.items() if key.startswith("pass@")}


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(sum(present) / len(present), 4) if present else None


def _token_accounting(records: list[tracking.MetricRecord]) -> dict[str, Any]:
    """The run's token accounting, summed over its steps' batches."""

    def total(key: str) -> int:
        return int(sum(r.values.get(key, 0.0) for r in records))

    merged, splits = total("merged_calls"), total("splits")
    reasons = sorted({key.removeprefix("splits_") for r in records for key in r.values if key.startswith("splits_")})
    return {"tokens_trained": total("tokens_trained"), "tokens_unique": total("tokens_unique"),
            "merge_rate": merged / (merged + splits) if merged + splits else None,
            "splits": {reason: total(f"splits_{reason}") for reason in reasons}}  # fmt: skip

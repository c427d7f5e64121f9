"""The trainer: one run at a time, fed by the assembler, synced into vLLM after every update.

The run loop lives in its own thread (torch work is blocking); RPCs read its status
and steer it through events. One lock guards the policy, so a SaveCheckpoint or
SyncWeights RPC never sees weights halfway through an optimizer step.

A step: wait for a batch; in sync mode hold ingest traffic so no rollout runs on
the old policy; train; push and verify the new weights (see `weight_sync`); ack the
batch with the new policy version; record metrics. A failed sync ends the run as
FAILED with a checkpoint of the trained weights, from which StartRun resumes.
"""

from __future__ import annotations

import re
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import structlog
from tqdm.auto import tqdm

from parity.api.assembler.v1 import batch_pb2
from parity.api.ingest.v1 import ingest_service_pb2 as ingest_pb
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import RPCError
from parity.services.runtime.addresses import UnresolvedAddress
from parity.services.runtime.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ParityError,
    Unavailable,
)
from parity.services.trainer import checkpoints
from parity.services.trainer.backends import TrainingBackend, backend_name, select_backend
from parity.services.trainer.batch_source import BatchSource, FeedSubscription
from parity.services.trainer.batch_tensors import to_training_batch
from parity.services.trainer.checkpoints import CheckpointInfo
from parity.services.trainer.ingest_fleet import IngestFleet
from parity.services.trainer.lora import check_run
from parity.services.trainer.policy_export import export_policy
from parity.services.trainer.replicas import ReplicaError, VllmReplica
from parity.services.trainer.run_history import RunHistory
from parity.services.trainer.run_settings import RunSettings
from parity.services.trainer.run_status import RunState, RunStatus
from parity.services.trainer.step_batches import step_batch
from parity.services.trainer.step_metrics import MetricsLog, StepRecord, plot_run
from parity.services.trainer.weight_sync import SyncFailed, SyncResult, WeightSync, probe_tokens

log = structlog.get_logger(__name__)

PLOT_FILE = "reward_loss.png"
# A run id names a folder under the checkpoint root, so it is kept to what every file system takes.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class TrainerDeployment:
    """Where the trainer's peers are; fixed for the life of the service."""

    assembler_address: str
    replica_urls: tuple[str, ...]
    work_dir: Path
    """Weights pushed to replicas are written under work_dir/weights."""
    ingest_addresses: tuple[str, ...] = ()
    """Every ingest replica: all are paused, versioned and resumed together around each sync."""
    consumer_id: str = "trainer"
    sync_tolerance: float = 0.0
    """Largest probe difference a verified replica may show; 0 derives it from the dtypes on both sides."""
    max_message_bytes: int = 64 << 20
    replica_api_key: str = field(default="", repr=False)
    """vLLM's VLLM_API_KEY, sent to every replica."""


class Trainer:
    def __init__(self, deployment: TrainerDeployment) -> None:
        self.deployment = deployment
        self.metrics = MetricsLog()
        self.history = RunHistory(deployment.work_dir / "runs")
        self.last_sync: SyncResult | None = None
        self._run: RunStatus | None = None
        self._backend: TrainingBackend | None = None
        self._policy_lock = threading.Lock()
        self._stop = threading.Event()
        self._unpaused = threading.Event()
        self._thread: threading.Thread | None = None
        self._ingests = IngestFleet(deployment.ingest_addresses)
        self._sync = WeightSync(
            [VllmReplica(url, api_key=deployment.replica_api_key) for url in deployment.replica_urls], deployment.work_dir / "weights",
            probe=[], tolerance=deployment.sync_tolerance, ingests=self._ingests,
        )  # fmt: skip

    # ----- what the RPCs call

    def status(self) -> tuple[RunStatus | None, SyncResult | None]:
        return (replace(self._run) if self._run else None), self.last_sync

    def start_run(self, settings: RunSettings | None, resume_checkpoint_id: str = "", run_id: str = "") -> RunStatus:
        if self._run is not None and self._run.state.active:
            raise FailedPrecondition(f"run {self._run.run_id} is {self._run.state.value}; stop it first")
        resume: CheckpointInfo | None = None
        if resume_checkpoint_id:
            root = settings.checkpoint_dir if settings else self._checkpoint_root()
            resume = checkpoints.find_checkpoint(root, resume_checkpoint_id)
            settings = settings or resume.settings
        if settings is None:
            raise InvalidArgument("config is required unless resuming from a checkpoint")
        if not (settings.model_path / "config.json").exists():
            raise InvalidArgument(f"model_path {settings.model_path} holds no config.json")
        if settings.lora_rank:
            self._check_lora(settings)
        if resume is not None:
            if resume.step >= settings.total_steps:
                raise InvalidArgument(f"checkpoint is at step {resume.step}; raise total_steps above it to resume")
            run = RunStatus(resume.run_id, settings, step=resume.step, policy_version=resume.policy_version)
            self.metrics.reset(MetricsLog.read_jsonl(resume.path / checkpoints.METRICS))
        else:
            run = RunStatus(self._new_run_id(settings, run_id), settings)
            self.metrics.reset()
        self._run = run
        self.history.start(run, self.metrics.records)
        self._stop.clear()
        self._unpaused.set()
        self._thread = threading.Thread(target=self._run_loop, args=(run, resume), name="training-run", daemon=True)
        self._thread.start()
        log.info("run_started", run_id=run.run_id, resumed_from=resume_checkpoint_id or None, step=run.step)
        return replace(run)

    def list_runs(self) -> list[RunStatus]:
        """Every run this trainer started, newest first."""
        return [self._as_now(run) for run in self.history.runs()]

    def get_run(self, run_id: str) -> RunStatus:
        run = self.history.get(run_id) if RUN_ID.fullmatch(run_id) else None
        if run is None:
            raise NotFound(f"this trainer has no run {run_id!r}")
        return self._as_now(run)

    def run_metrics(self, run_id: str, validation: bool) -> list[StepRecord]:
        self.get_run(run_id)
        if validation:
            return self.history.validations(run_id)
        if self._run is not None and self._run.run_id == run_id:
            return list(self.metrics.records)
        return self.history.metrics(run_id)

    def step_batch(self, run_id: str, step: int) -> trainer_pb.StepBatch:
        batch = self.history.batch(run_id, step) if RUN_ID.fullmatch(run_id) else None
        if batch is None:
            raise NotFound(f"run {run_id!r} has not trained step {step}")
        return batch

    def write_validation(self, run_id: str, step: int, values: dict[str, float]) -> StepRecord:
        run = self.get_run(run_id)
        if not 0 <= step <= run.settings.total_steps:
            raise InvalidArgument(f"step must be in 0..{run.settings.total_steps} (the run's steps), got {step}")
        record = StepRecord(run_id, step, time.time(), dict(values))
        self.history.record_validation(record)
        return record

    def pause(self) -> RunStatus:
        run = self._require_active()
        self._unpaused.clear()
        if run.state is RunState.WAITING_FOR_DATA:
            self._set_state(run, RunState.PAUSED)
        return replace(run)

    def resume(self) -> RunStatus:
        run = self._require_run()
        if run.state is RunState.PAUSED:
            self._set_state(run, RunState.WAITING_FOR_DATA)
        self._unpaused.set()
        return replace(run)

    def stop(self, timeout_s: float = 600.0) -> tuple[RunStatus, CheckpointInfo | None]:
        run = self._require_run()
        self._stop.set()
        self._unpaused.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        latest = checkpoints.list_checkpoints(run.settings.checkpoint_dir, run.run_id)
        return replace(run), (latest[0] if latest else None)

    def save_checkpoint(self) -> CheckpointInfo:
        run = self._require_run()
        with self._policy_lock:
            if self._backend is None:
                raise Unavailable("the run's model is not loaded yet; try again in a moment")
            return self._save(run, self._backend)

    def list_checkpoints(self, run_id: str = "") -> list[CheckpointInfo]:
        return checkpoints.list_checkpoints(self._checkpoint_root(), run_id)

    def export_policy(
        self, output_dir: str, checkpoint_id: str = "", merge_lora: bool = False
    ) -> tuple[Path, Path | None, CheckpointInfo]:
        """Write a checkpoint's policy (the latest of the current run by default) as a model folder, or a LoRA
        run's adapter; returns where, the merged model's folder when `merge_lora`, and the checkpoint."""
        if not output_dir.strip():
            raise InvalidArgument("output_dir is required")
        root = self._checkpoint_root()
        if checkpoint_id:
            checkpoint = checkpoints.find_checkpoint(root, checkpoint_id)
        else:
            run = self._require_run()
            latest = checkpoints.list_checkpoints(root, run.run_id)
            if not latest:
                raise FailedPrecondition(f"run {run.run_id} has no checkpoint yet")
            checkpoint = latest[0]
        path, merged = export_policy(checkpoint, Path(output_dir), merge_lora)
        log.info("policy_exported", checkpoint_id=checkpoint.checkpoint_id, path=str(path), merged=str(merged or ""))
        return path, merged, checkpoint

    def sync_weights(self, verify: bool = True) -> SyncResult:
        run = self._require_run()
        with self._policy_lock:
            if self._backend is None:
                raise Unavailable("the run's model is not loaded yet; try again in a moment")
            self.last_sync = self._sync.sync(self._backend, run.policy_version, verify=verify)
        return self.last_sync

    def close(self) -> None:
        if self._run is not None and self._run.state.active:
            self.stop()

    def _check_lora(self, settings: RunSettings) -> None:
        """A LoRA run nothing could train or serve is refused here, before any step, saying why."""
        check_run(settings, backend_name(settings))
        for replica in self._sync.replicas:
            try:
                refusal = replica.server_info().lora_refusal(settings.lora_rank)
            except ReplicaError as error:
                raise Unavailable(f"cannot ask replica {replica.base_url} whether it serves LoRA adapters: {error}") from None
            if refusal:
                raise FailedPrecondition(f"replica {replica.base_url} cannot serve this run's LoRA adapter: {refusal}")

    # ----- the run loop

    def _run_loop(self, run: RunStatus, resume: CheckpointInfo | None) -> None:
        settings = run.settings
        source = BatchSource(
            self.deployment.assembler_address,
            FeedSubscription(
                self.deployment.consumer_id, settings.groups_per_batch,
                max_policy_lag=settings.max_policy_lag if settings.rollout_mode == "async" else None,
                run_id=run.run_id,
            ),
            policy_version=lambda: run.policy_version,
            max_message_bytes=self.deployment.max_message_bytes,
        )  # fmt: skip
        backend: TrainingBackend | None = None
        final = RunState.FAILED
        try:
            with self._policy_lock:
                if self._backend is not None:
                    # The last run's policy stays until a new run replaces it (SaveCheckpoint and
                    # SyncWeights use it); its Ray actors must give their GPUs back first.
                    self._backend.close()
                    self._backend = None
                backend = select_backend(settings)
                if resume is not None:
                    backend.load_state(resume.path)
                self._backend = backend
                self._sync.probe = probe_tokens(_vocab_size(settings.model_path))
                run.policy_version = max(run.policy_version, self._ingest_policy_version())
                # Replicas may serve anything (a restarted vLLM, another run's weights):
                # start from a verified copy of the weights this run trains.
                self.last_sync = self._sync.sync(backend, run.policy_version)
            final = self._train(run, backend, source)
        except Exception as error:  # noqa: BLE001 - the run's failure is reported in its status
            self._fail(run, backend, error)
        finally:
            source.close()
            self._release_traffic()
            self._plot(run)
            # Last, so a client that sees the run end also sees its plot and checkpoint.
            self._set_state(run, final)
            log.info("run_ended", run_id=run.run_id, state=final.value, step=run.step, plot=run.plot_path,
                     error=run.error or None)  # fmt: skip

    def _train(self, run: RunStatus, backend: TrainingBackend, source: BatchSource) -> RunState:
        """Train until the step budget or a stop; returns how the run ended."""
        settings = run.settings
        # A bar only on a terminal: a log has the JSON `step` line of each step.
        progress = tqdm(total=settings.total_steps, initial=run.step, desc=f"training {run.run_id}", unit="step",
                        disable=not sys.stderr.isatty())  # fmt: skip
        try:
            while run.step < settings.total_steps and not self._stop.is_set():
                if not self._unpaused.is_set():
                    self._set_state(run, RunState.PAUSED)
                    self._unpaused.wait()
                if self._stop.is_set():
                    break
                self._set_state(run, RunState.WAITING_FOR_DATA)
                waited = time.perf_counter()
                batch = source.next_batch(self._stop)
                if batch is None:
                    break
                wait_seconds = time.perf_counter() - waited
                with self._policy_lock:
                    if settings.rollout_mode == "sync":
                        self._sync.hold(f"training step {run.step + 1}")
                    self._set_state(run, RunState.TRAINING)
                    tensors = to_training_batch(batch.samples)
                    values = backend.train_step(tensors)
                    run.step += 1
                    run.policy_version += 1
                    self._set_state(run, RunState.SYNCING)
                    try:
                        self.last_sync = self._sync.sync(backend, run.policy_version)
                    except SyncFailed:
                        # The update is applied and will be in the failure checkpoint: ack its batch.
                        source.ack(batch.batch_id, run.policy_version)
                        raise
                source.ack(batch.batch_id, run.policy_version)
                values.update(_batch_values(tensors.rewards, tensors.policy_versions, run.policy_version - 1))
                values.update(token_accounting(batch.stats))
                values.update(wait_seconds=wait_seconds, sync_seconds=self.last_sync.durations_s["total"],
                              sync_max_logprob_diff=self.last_sync.max_logprob_diff, policy_version=run.policy_version)  # fmt: skip
                for phase, seconds in self.last_sync.durations_s.items():
                    values[f"sync_{phase}_seconds"] = seconds
                record = self.metrics.append(run.run_id, run.step, values)
                self.history.record_step(record, step_batch(run.run_id, run.step, batch, tensors, settings.advantage_estimator))
                log.info("step", run_id=run.run_id, step=run.step, **{k: round(v, 6) for k, v in values.items()})
                progress.set_postfix(reward=f"{values['reward_mean']:.3f}", loss=f"{values['policy_loss']:.4f}", refresh=False)
                progress.update(1)
                if settings.checkpoint_interval and run.step % settings.checkpoint_interval == 0:
                    with self._policy_lock:
                        self._save(run, backend)
        finally:
            progress.close()
        with self._policy_lock:
            self._save(run, backend)
        return RunState.COMPLETED if run.step >= settings.total_steps else RunState.STOPPED

    def _fail(self, run: RunStatus, backend: TrainingBackend | None, error: Exception) -> None:
        message = str(error) if isinstance(error, ParityError) else f"{type(error).__name__}: {error}"
        log.error("run_failed", run_id=run.run_id, step=run.step, error=message)
        run.error = message
        if backend is not None:
            try:
                saved = self._save(run, backend)
                run.error += f" (resumable from checkpoint {saved.checkpoint_id})"
            except Exception as save_error:  # noqa: BLE001 - the original failure is what the user needs
                log.error("failure_checkpoint_failed", run_id=run.run_id, error=str(save_error))

    def _plot(self, run: RunStatus) -> None:
        if not self.metrics.records:
            return
        path = run.settings.checkpoint_dir / run.run_id / PLOT_FILE
        try:
            run.plot_path = str(plot_run(self.metrics.records, path, f"{run.run_id}: reward and loss per step"))
        except Exception as error:  # noqa: BLE001 - a plot never fails a run
            log.error("plot_failed", error=str(error))

    def _save(self, run: RunStatus, backend: TrainingBackend) -> CheckpointInfo:
        root = run.settings.checkpoint_dir
        final = checkpoints.checkpoint_path(root, run.run_id, run.step)
        staging = final.with_name(final.name + ".partial")
        staging.mkdir(parents=True, exist_ok=True)
        backend.save_state(staging)
        self.metrics.write_jsonl(staging / checkpoints.METRICS)
        checkpoints.write_manifest(staging, run.run_id, run.step, run.policy_version, run.settings)
        checkpoints.commit(staging, final)
        log.info("checkpoint_saved", run_id=run.run_id, step=run.step, path=str(final))
        return checkpoints.CheckpointInfo.read(final, root)

    def _release_traffic(self) -> None:
        """Never leave agents held: a run that ends mid-step (sync mode holds traffic while training) resumes it."""
        try:
            self._sync.release()
        except SyncFailed as error:
            log.error("resume_traffic_failed", error=str(error))

    def _ingest_policy_version(self) -> int:
        """The highest version any ingest stamps: a run resumes past every one of them."""
        versions = [0]
        try:
            members = self._ingests.members()
        except UnresolvedAddress as error:
            raise Unavailable(f"ingest {error}") from None
        for ingest in members:
            try:
                versions.append(int(ingest.get_stats(ingest_pb.GetStatsRequest()).policy_version))
            except RPCError as error:
                raise Unavailable(f"ingest at {ingest.address}: {error}") from None
        return max(versions)

    def _set_state(self, run: RunStatus, state: RunState) -> None:
        run.state = state
        run.update_time = time.time()
        self.history.save(run)

    def _as_now(self, run: RunStatus) -> RunStatus:
        """The current run as it is now; another that the history has as active was cut short
        when this trainer stopped."""
        if self._run is not None and run.run_id == self._run.run_id:
            return replace(self._run)
        if run.state.active:
            run.state = RunState.FAILED
            run.error = run.error or "the trainer stopped during the run; resume it from its latest checkpoint"
        return run

    @staticmethod
    def _new_run_id(settings: RunSettings, requested: str) -> str:
        if not requested:
            return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        if not RUN_ID.fullmatch(requested):
            raise InvalidArgument(
                f"run_id {requested!r} must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        if checkpoints.list_checkpoints(settings.checkpoint_dir, requested):
            raise AlreadyExists(f"run {requested!r} has checkpoints under {settings.checkpoint_dir}; resume it instead")
        return requested

    @property
    def default_checkpoint_dir(self) -> Path:
        """Where a run that names no checkpoint_dir keeps its checkpoints."""
        return self.deployment.work_dir / "checkpoints"

    def _checkpoint_root(self) -> Path:
        return self._run.settings.checkpoint_dir if self._run else self.default_checkpoint_dir

    def _require_run(self) -> RunStatus:
        if self._run is None:
            raise FailedPrecondition("no run has been started")
        return self._run

    def _require_active(self) -> RunStatus:
        run = self._require_run()
        if not run.state.active:
            raise FailedPrecondition(f"run {run.run_id} is {run.state.value}")
        return run


def _batch_values(rewards: np.ndarray, versions: np.ndarray, trained_version: int) -> dict[str, float]:
    return {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "sample_count": float(len(rewards)),
        "policy_lag_max": float(max(0, trained_version - int(versions.min()))),
    }


def token_accounting(stats: batch_pb2.BatchStats) -> dict[str, float]:
    """What prefix merging saved and what splits cost, per batch: tokens trained, those tokens counted once, their
    ratio, the share of call-to-call joins that merged, and the splits by reason."""
    values = {
        "tokens_trained": float(stats.token_count),
        "tokens_unique": float(stats.unique_token_count),
        "token_repetition": stats.token_count / stats.unique_token_count if stats.unique_token_count else 1.0,
    }
    values |= {"merged_calls": float(stats.merged_call_count), "splits": float(stats.split_count)}
    joins = stats.merged_call_count + stats.split_count
    if joins:
        values["merge_rate"] = stats.merged_call_count / joins
    values |= {f"splits_{reason}": float(count) for reason, count in sorted(stats.split_reasons.items())}
    return values


def _vocab_size(model_path: Path) -> int:
    import json

    return int(json.loads((model_path / "config.json").read_text())["vocab_size"])

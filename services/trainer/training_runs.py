"""The trainer service's runs, fed by the assembler, synced into vLLM after every update.

This is the domain object the servicer calls: it starts, lists, pauses, resumes and stops
runs, and saves, lists and exports their checkpoints. Each run trains in a `RunLoop` of its
own; RPCs read its status and steer it between steps. The policy it trains is a
`LivePolicy`, whose lock SaveCheckpoint and SyncWeights take too.

One run trains at a time unless `max_concurrent_runs` is above 1: then LoRA runs on one base
model train at once (`run_admission`), each an adapter on a `SharedBase`, pushed to every
replica under a model name of its own (`Run.served_model`) that its agents ask for.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import structlog

from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.core.attribution import check_end_user_id
from parity.services.runtime.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ParityError,
    Unavailable,
)
from parity.services.trainer import checkpoints
from parity.services.trainer.backends import backend_name
from parity.services.trainer.backends.shared_base import SharedBase
from parity.services.trainer.checkpoints import CheckpointInfo
from parity.services.trainer.live_policy import LivePolicy
from parity.services.trainer.lora import check_run, run_model_name
from parity.services.trainer.peers import IngestFleet, TrainerDeployment
from parity.services.trainer.policy_export import export_policy
from parity.services.trainer.promotion.gate import DEFAULT_METRIC
from parity.services.trainer.promotion.log import PromotionRecord
from parity.services.trainer.promotion.serving import Promotions
from parity.services.trainer.replicas import ReplicaError, VllmReplica
from parity.services.trainer.run_admission import check_admission
from parity.services.trainer.run_history import RunHistory
from parity.services.trainer.run_ids import is_run_id, new_run_id
from parity.services.trainer.run_loop import RunLoop
from parity.services.trainer.run_settings import RunSettings
from parity.services.trainer.run_status import RunState, RunStatus
from parity.services.trainer.step_metrics import MetricsLog, StepRecord
from parity.services.trainer.teacher import Teacher
from parity.services.trainer.weight_sync import SyncResult, WeightSync

log = structlog.get_logger(__name__)
MAX_LINEAGE_SESSIONS = 1000
# The runs a trainer stopped because it shut down, which its next start resumes.
INTERRUPTED_FILE = "interrupted-runs.json"


class TrainingRuns:
    def __init__(self, deployment: TrainerDeployment) -> None:
        self.deployment = deployment
        self.metrics = MetricsLog()
        """Every run's steps, as they are trained: what StreamMetrics sends."""
        self.history = RunHistory(deployment.work_dir / "runs")
        # The runs this process started, oldest first; of one-at-a-time runs, only the latest.
        self._loops: dict[str, RunLoop] = {}
        self._ingests = IngestFleet(deployment.ingest_addresses)
        self._replicas = [
            VllmReplica(url, api_key=deployment.replica_api_key) for url in deployment.replica_urls
        ]
        # The policy of a run that trains alone: its backend stays loaded until the next run replaces it.
        self._policy = LivePolicy(WeightSync(
            self._replicas, deployment.work_dir / "weights", probe=[], tolerance=deployment.sync_tolerance,
            ingests=self._ingests,
        ))  # fmt: skip
        self._bases: dict[Path, SharedBase] = {}
        self._starting = threading.Lock()
        self.promotions = Promotions(deployment)

    @property
    def concurrent(self) -> bool:
        """Whether LoRA runs train at once, each an adapter on one shared base with a route of its own."""
        return self.deployment.max_concurrent_runs > 1

    # ----- what the RPCs call

    def status(self, run_id: str = "") -> tuple[RunStatus | None, SyncResult | None]:
        """A run (the latest started by default) as it is now, and its latest sync."""
        loop = self._loops.get(run_id) if run_id else self._latest_loop()
        if loop is not None:
            return replace(loop.run), loop.policy.last_sync
        return (self.get_run(run_id) if run_id else None), None

    def start_run(
        self, settings: RunSettings | None, resume_checkpoint_id: str = "", run_id: str = ""
    ) -> RunStatus:
        with self._starting:
            return self._start_run(settings, resume_checkpoint_id, run_id)

    def _start_run(
        self, settings: RunSettings | None, resume_checkpoint_id: str, run_id: str
    ) -> RunStatus:
        if canary := self.promotions.canary_running():
            raise FailedPrecondition(
                f"the canary of {canary} serves users from this trainer's replicas; promote it or end it (parity trainer "
                "rollback) before a run changes them"
            )  # fmt: skip
        resume: CheckpointInfo | None = None
        if resume_checkpoint_id:
            root = settings.checkpoint_dir if settings else self._checkpoint_root()
            resume = checkpoints.find_checkpoint(root, resume_checkpoint_id)
            settings = settings or resume.settings
        if settings is None:
            raise InvalidArgument("config is required unless resuming from a checkpoint")
        if not (settings.model_path / "config.json").exists():
            raise InvalidArgument(f"model_path {settings.model_path} holds no config.json")
        active = [loop.run for loop in self._loops.values() if loop.run.state.active]
        check_admission(
            settings, backend_name(settings), active, self.deployment.max_concurrent_runs
        )
        if resume is not None and resume.run_id in [run.run_id for run in active]:
            raise FailedPrecondition(
                f"run {resume.run_id} is training; it resumes once it has ended"
            )
        if settings.lora_rank:
            self._check_lora(settings)
        if settings.teacher:
            Teacher(settings.teacher_urls, settings.teacher_model).check(settings.model_path)
        restored: list[StepRecord] = []
        if resume is not None:
            if resume.step >= settings.total_steps:
                raise InvalidArgument(
                    f"checkpoint is at step {resume.step}; raise total_steps above it to resume"
                )
            run = RunStatus(
                resume.run_id, settings, step=resume.step, policy_version=resume.policy_version
            )
            restored = MetricsLog.read_jsonl(resume.path / checkpoints.METRICS)
        else:
            run = RunStatus(new_run_id(settings.checkpoint_dir, run_id), settings)
        # Past every version users were served, so calls and samples never share a version across policies.
        run.policy_version = max(run.policy_version, self.promotions.highest_policy_version())
        loop = self._new_loop(run, resume, restored)
        self.history.start(run, restored)
        loop.start()
        log.info("run_started", run_id=run.run_id, resumed_from=resume_checkpoint_id or None, step=run.step,
                 dtype=run.settings.dtype, served_model=run.served_model or None)  # fmt: skip
        return replace(run)

    def _new_loop(
        self, run: RunStatus, resume: CheckpointInfo | None, restored: list[StepRecord]
    ) -> RunLoop:
        """The run's loop: alone, on the trainer's one policy; of several, on the base they share."""
        settings = run.settings
        metrics = MetricsLog(list(restored), feed=self.metrics)
        if not (self.concurrent and settings.lora_rank):
            self._forget_ended_runs()
            self._loops.clear()
            self.metrics.reset(restored)
            loop = RunLoop(
                run, resume, self.deployment, self._policy, self._ingests, metrics, self.history
            )
        else:
            self._forget_ended_runs()
            base = self._bases.setdefault(
                settings.model_path.resolve(), SharedBase(settings.model_path)
            )
            served = self._replicas[0].model_name() if self._replicas else settings.model_path.name
            run.served_model = run_model_name(served, run.run_id)
            policy = LivePolicy(WeightSync(
                self._replicas, self.deployment.work_dir / "weights" / run.run_id, probe=[],
                tolerance=self.deployment.sync_tolerance, ingests=self._ingests, route_model=run.served_model,
            ), lock=base.lock)  # fmt: skip
            loop = RunLoop(run, resume, self.deployment, policy, self._ingests, metrics, self.history, base,
                           consumer_id=f"{self.deployment.consumer_id}/{run.run_id}")  # fmt: skip
        self._loops[run.run_id] = loop
        return loop

    def _forget_ended_runs(self) -> None:
        """Free the adapters of runs that ended, the bases no active run trains on, and a lone run's model."""
        for run_id, loop in list(self._loops.items()):
            if not loop.run.state.active:
                del self._loops[run_id]
                if loop.policy.backend is not None and loop.policy is not self._policy:
                    loop.policy.backend.close()
        # A lone run's policy stays until the next run starts (SaveCheckpoint and SyncWeights use it); its Ray
        # actors must give their GPUs back before the next run's start.
        if self._policy.backend is not None and not self._loops:
            with self._policy.lock:
                self._policy.backend.close()
                self._policy.backend = None
        in_use = {loop.run.settings.model_path.resolve() for loop in self._loops.values()}
        self._bases = {path: base for path, base in self._bases.items() if path in in_use}

    def list_runs(self) -> list[RunStatus]:
        """Every run this trainer started, newest first."""
        return [self._as_now(run) for run in self.history.runs()]

    def get_run(self, run_id: str) -> RunStatus:
        run = self.history.get(run_id) if is_run_id(run_id) else None
        if run is None:
            raise NotFound(f"this trainer has no run {run_id!r}")
        return self._as_now(run)

    def run_metrics(self, run_id: str, validation: bool) -> list[StepRecord]:
        self.get_run(run_id)
        if validation:
            return self.history.validations(run_id)
        loop = self._loops.get(run_id)
        if loop is not None:
            return list(loop.metrics.records)
        return self.history.metrics(run_id)

    def step_batch(self, run_id: str, step: int) -> trainer_pb.StepBatch:
        batch = self.history.batch(run_id, step) if is_run_id(run_id) else None
        if batch is None:
            raise NotFound(f"run {run_id!r} has not trained step {step}")
        return batch

    def trained_sessions(
        self, end_user_id: str, session_ids: list[str]
    ) -> list[trainer_pb.TrainedSessionsStep]:
        if not end_user_id and not session_ids:
            raise InvalidArgument("end_user_id or session_ids is required: whose data to look for")
        if len(session_ids) > MAX_LINEAGE_SESSIONS:
            raise InvalidArgument(
                f"session_ids holds {len(session_ids)} ids; at most {MAX_LINEAGE_SESSIONS} are allowed"
            )
        try:
            check_end_user_id(end_user_id)
        except ValueError as error:
            raise InvalidArgument(str(error)) from None
        return self.history.trained_sessions(end_user_id, session_ids)

    def write_validation(self, run_id: str, step: int, values: dict[str, float]) -> StepRecord:
        run = self.get_run(run_id)
        if not 0 <= step <= run.settings.total_steps:
            raise InvalidArgument(
                f"step must be in 0..{run.settings.total_steps} (the run's steps), got {step}"
            )
        record = StepRecord(run_id, step, time.time(), dict(values))
        self.history.record_validation(record)
        return record

    def pause(self, run_id: str = "") -> RunStatus:
        loop = self._loop(run_id)
        if not loop.run.state.active:
            raise FailedPrecondition(f"run {loop.run.run_id} is {loop.run.state.value}")
        loop.pause()
        return replace(loop.run)

    def resume(self, run_id: str = "") -> RunStatus:
        loop = self._loop(run_id)
        loop.resume()
        return replace(loop.run)

    def stop(
        self, run_id: str = "", timeout_s: float = 600.0
    ) -> tuple[RunStatus, CheckpointInfo | None]:
        loop = self._loop(run_id)
        loop.stop(timeout_s)
        run = loop.run
        latest = checkpoints.list_checkpoints(run.settings.checkpoint_dir, run.run_id)
        return replace(run), (latest[0] if latest else None)

    def save_checkpoint(self, run_id: str = "") -> CheckpointInfo:
        loop = self._loop(run_id)
        with loop.policy.lock:
            return checkpoints.save(loop.run, loop.policy.loaded(), loop.metrics)

    def list_checkpoints(self, run_id: str = "") -> list[CheckpointInfo]:
        return checkpoints.list_checkpoints(self._checkpoint_root(run_id), run_id)

    def export_policy(
        self, output_dir: str, checkpoint_id: str = "", merge_lora: bool = False
    ) -> tuple[Path, Path | None, CheckpointInfo]:
        """Write a checkpoint's policy (the latest of the current run by default) as a model folder, or a LoRA
        run's adapter; returns where, the merged model's folder when `merge_lora`, and the checkpoint."""
        if not output_dir.strip():
            raise InvalidArgument("output_dir is required")
        root = self._checkpoint_root(checkpoint_id.split("/", 1)[0])
        if checkpoint_id:
            checkpoint = checkpoints.find_checkpoint(root, checkpoint_id)
        else:
            checkpoint = _latest_checkpoint(root, self._loop("").run)
        path, merged = export_policy(checkpoint, Path(output_dir), merge_lora)
        log.info(
            "policy_exported",
            checkpoint_id=checkpoint.checkpoint_id,
            path=str(path),
            merged=str(merged or ""),
        )
        return path, merged, checkpoint

    def sync_weights(self, verify: bool = True, run_id: str = "") -> SyncResult:
        loop = self._loop(run_id)
        with loop.policy.lock:
            return loop.policy.push(loop.run.policy_version, verify=verify)

    def promote(
        self, run_id: str, checkpoint_id: str, metric: str, margin: float, canary_share: float = 0.0,
        served_model: str = "",
    ) -> PromotionRecord:  # fmt: skip
        """Gate the run's checkpoint (its latest by default) and, if it passes, serve it to users (with
        `served_model`, to those whose agents ask for that name)."""
        run = self.get_run(run_id)
        root = run.settings.checkpoint_dir
        if checkpoint_id:
            checkpoint = checkpoints.find_checkpoint(root, checkpoint_id)
            if checkpoint.run_id != run.run_id:
                raise InvalidArgument(
                    f"checkpoint {checkpoint_id} belongs to run {checkpoint.run_id}, not {run.run_id}"
                )
        else:
            checkpoint = _latest_checkpoint(root, run)
        training = [loop.run.run_id for loop in self._loops.values() if loop.run.state.active]
        if canary_share and training:
            raise FailedPrecondition(
                f"run {training[0]} is training on this trainer's replicas, which a canary would serve from"
            )
        validations = self.history.validations(run.run_id)
        return self.promotions.promote(
            checkpoint,
            validations,
            metric or DEFAULT_METRIC,
            margin,
            canary_share,
            self._policy.weight_sync,
            served_model,
        )

    def close(self) -> None:
        """Stop every active run, each leaving a checkpoint, and note them for the next start to resume."""
        interrupted = [run_id for run_id, loop in self._loops.items() if loop.run.state.active]
        for run_id in interrupted:
            self.stop(run_id)
        if interrupted:
            (self.deployment.work_dir / INTERRUPTED_FILE).write_text(json.dumps(interrupted))

    def resume_interrupted(self) -> list[str]:
        """Resume, each from its latest checkpoint and oldest first, the runs this trainer was training when it
        stopped: those it noted at shutdown, and those its history still has as active (it was killed). A run
        that cannot start again is recorded as failed, with the reason. Returns the resumed runs."""
        noted = self.deployment.work_dir / INTERRUPTED_FILE
        shut_down = set(json.loads(noted.read_text())) if noted.exists() else set()
        resumed = []
        for run in reversed(self.history.runs()):
            if not (run.state.active or run.run_id in shut_down) or run.run_id in self._loops:
                continue
            try:
                latest = _latest_checkpoint(run.settings.checkpoint_dir, run)
                self.start_run(run.settings, latest.checkpoint_id)
            except ParityError as error:
                run.state, run.error = (
                    RunState.FAILED,
                    f"the trainer restarted and could not resume the run: {error}",
                )
                self.history.save(run)
                log.warning("run_not_resumed", run_id=run.run_id, error=str(error))
                continue
            resumed.append(run.run_id)
            log.info("run_resumed_after_restart", run_id=run.run_id, step=latest.step)
        noted.unlink(missing_ok=True)
        return resumed

    def _check_lora(self, settings: RunSettings) -> None:
        """A LoRA run nothing could train or serve is refused here, before any step, saying why."""
        check_run(settings, backend_name(settings))
        for replica in self._replicas:
            try:
                refusal = replica.server_info().lora_refusal(settings.lora_rank)
            except ReplicaError as error:
                raise Unavailable(
                    f"cannot ask replica {replica.base_url} whether it serves LoRA adapters: {error}"
                ) from None
            if refusal:
                raise FailedPrecondition(
                    f"replica {replica.base_url} cannot serve this run's LoRA adapter: {refusal}"
                )

    def _as_now(self, run: RunStatus) -> RunStatus:
        """The current run as it is now; another that the history has as active was cut short
        when this trainer stopped."""
        loop = self._loops.get(run.run_id)
        if loop is not None:
            return replace(loop.run)
        if run.state.active:
            run.state = RunState.FAILED
            run.error = (
                run.error
                or "the trainer stopped during the run; resume it from its latest checkpoint"
            )
        return run

    @property
    def default_checkpoint_dir(self) -> Path:
        """Where a run that names no checkpoint_dir keeps its checkpoints."""
        return self.deployment.work_dir / "checkpoints"

    def _checkpoint_root(self, run_id: str = "") -> Path:
        """Where the run keeps its checkpoints (runs may each name their own); by default, the latest run's."""
        loop = self._loops.get(run_id) if run_id else None
        known = loop.run if loop else (self.history.get(run_id) if is_run_id(run_id) else None)
        latest = self._latest_loop()
        if known is None and latest is not None:
            known = latest.run
        return known.settings.checkpoint_dir if known else self.default_checkpoint_dir

    def _latest_loop(self) -> RunLoop | None:
        return next(reversed(self._loops.values()), None)

    def _loop(self, run_id: str) -> RunLoop:
        """The named run's loop; unnamed, the only active run's, else the latest run's."""
        if run_id:
            loop = self._loops.get(run_id)
            if loop is not None:
                return loop
            if is_run_id(run_id) and self.history.get(run_id) is not None:
                raise FailedPrecondition(
                    f"run {run_id} is not loaded in this trainer; resume it from its checkpoint"
                )
            raise NotFound(f"this trainer has no run {run_id!r}")
        active = [loop for loop in self._loops.values() if loop.run.state.active]
        if len(active) > 1:
            raise FailedPrecondition(
                f"{len(active)} runs are active ({', '.join(loop.run.run_id for loop in active)}); name one with run_id"
            )
        loop = active[0] if active else self._latest_loop()
        if loop is None:
            raise FailedPrecondition("no run has been started")
        return loop


def _latest_checkpoint(root: Path, run: RunStatus) -> CheckpointInfo:
    latest = checkpoints.list_checkpoints(root, run.run_id)
    if not latest:
        raise FailedPrecondition(f"run {run.run_id} has no checkpoint yet")
    return latest[0]

"""One run's loop: the thread that trains step after step (torch work is blocking).

A step: wait for a batch; take the policy's lock (runs sharing a base model take turns on
it, and each step says how long it waited, `base_wait_seconds`); with a distillation
teacher, have it score the batch; in sync mode hold ingest traffic so no rollout runs on
the old policy; train; push and verify the new weights (see `weight_sync`); ack the batch
with the new policy version; record metrics. A failed sync ends the run as FAILED with a
checkpoint of the trained weights, from which StartRun resumes.
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import structlog
from tqdm.auto import tqdm

from parity.api.assembler.v1 import batch_pb2
from parity.services.runtime.allocator import release_freed_memory
from parity.services.runtime.errors import ParityError
from parity.services.trainer import checkpoints
from parity.services.trainer.backends import TrainingBackend, select_backend
from parity.services.trainer.backends.shared_base import SharedBase
from parity.services.trainer.batch_source import BatchSource, FeedSubscription
from parity.services.trainer.batch_tensors import to_training_batch
from parity.services.trainer.checkpoints import CheckpointInfo
from parity.services.trainer.live_policy import LivePolicy
from parity.services.trainer.peers import IngestFleet, TrainerDeployment
from parity.services.trainer.policy_loss import teacher_kl
from parity.services.trainer.run_dtype import settings_for_replicas
from parity.services.trainer.run_history import RunHistory
from parity.services.trainer.run_status import RunState, RunStatus
from parity.services.trainer.step_batches import step_batch
from parity.services.trainer.step_metrics import MetricsLog, plot_run
from parity.services.trainer.teacher import Teacher
from parity.services.trainer.weight_sync import SyncFailed, model_probe

log = structlog.get_logger(__name__)

PLOT_FILE = "reward_loss.png"


class RunLoop:
    """Trains `run` on a thread of its own; pause, resume and stop steer it between steps."""

    def __init__(
        self, run: RunStatus, resume: CheckpointInfo | None, deployment: TrainerDeployment, policy: LivePolicy,
        ingests: IngestFleet, metrics: MetricsLog, history: RunHistory, base: SharedBase | None = None,
        consumer_id: str = "",
    ) -> None:  # fmt: skip
        self.run = run
        self.policy = policy
        self.metrics = metrics
        self._base = base
        self._consumer_id = consumer_id or deployment.consumer_id
        self._resume = resume
        self._deployment = deployment
        self._ingests = ingests
        self._history = history
        self._stop = threading.Event()
        self._unpaused = threading.Event()
        self._unpaused.set()
        self._thread = threading.Thread(target=self._run, name="training-run", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def pause(self) -> None:
        self._unpaused.clear()
        if self.run.state is RunState.WAITING_FOR_DATA:
            self._set_state(RunState.PAUSED)

    def resume(self) -> None:
        if self.run.state is RunState.PAUSED:
            self._set_state(RunState.WAITING_FOR_DATA)
        self._unpaused.set()

    def stop(self, timeout_s: float) -> None:
        """Ask the loop to end after its current step, and wait up to `timeout_s` for it to."""
        self._stop.set()
        self._unpaused.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        run, settings = self.run, self.run.settings
        source = BatchSource(
            self._deployment.assembler_address,
            FeedSubscription(
                self._consumer_id, settings.groups_per_batch,
                max_policy_lag=settings.max_policy_lag if settings.rollout_mode == "async" else None,
                run_id=run.run_id,
            ),
            policy_version=lambda: run.policy_version,
            max_message_bytes=self._deployment.max_message_bytes,
        )  # fmt: skip
        backend: TrainingBackend | None = None
        final = RunState.FAILED
        try:
            with self.policy.lock:
                settings = run.settings = settings_for_replicas(
                    settings, self.policy.weight_sync.replicas
                )
                backend = select_backend(settings, self._base)
                if self._resume is not None:
                    backend.load_state(self._resume.path)
                self.policy.backend = backend
                self.policy.weight_sync.probe = model_probe(settings.model_path)
                run.policy_version = max(run.policy_version, self._ingests.highest_policy_version())
                # Replicas may serve anything (a restarted vLLM, another run's weights):
                # start from a verified copy of the weights this run trains.
                self.policy.push(run.policy_version)
            final = self._train(backend, source)
        except Exception as error:  # noqa: BLE001 - the run's failure is reported in its status
            self._fail(backend, error)
        finally:
            source.close()
            self._release_traffic()
            self._plot()
            # Last, so a client that sees the run end also sees its plot and checkpoint.
            self._set_state(final)
            log.info("run_ended", run_id=run.run_id, state=final.value, step=run.step, plot=run.plot_path,
                     error=run.error or None)  # fmt: skip

    def _train(self, backend: TrainingBackend, source: BatchSource) -> RunState:
        """Train until the step budget or a stop; returns how the run ended."""
        run, settings = self.run, self.run.settings
        teacher = (
            Teacher(settings.teacher_urls, settings.teacher_model) if settings.teacher else None
        )
        # A bar only on a terminal: a log has the JSON `step` line of each step.
        progress = tqdm(total=settings.total_steps, initial=run.step, desc=f"training {run.run_id}", unit="step",
                        disable=not sys.stderr.isatty())  # fmt: skip
        try:
            while run.step < settings.total_steps and not self._stop.is_set():
                if not self._unpaused.is_set():
                    self._set_state(RunState.PAUSED)
                    self._unpaused.wait()
                if self._stop.is_set():
                    break
                self._set_state(RunState.WAITING_FOR_DATA)
                waited = time.perf_counter()
                batch = source.next_batch(self._stop)
                if batch is None:
                    break
                wait_seconds = time.perf_counter() - waited
                teacher_values: dict[str, float] = {}
                with self.policy.lock:
                    base_wait_seconds = self.policy.lock.last_wait_s
                    if settings.rollout_mode == "sync":
                        self.policy.weight_sync.hold(f"training step {run.step + 1}")
                    # Scoring is part of the step: a driver that saw the run still waiting for data would top it up.
                    self._set_state(RunState.TRAINING)
                    tensors = to_training_batch(batch.samples)
                    if teacher is not None:
                        scored = time.perf_counter()
                        tensors = tensors.with_teacher(teacher.score(batch.samples))
                        teacher_values = {
                            "teacher_kl": teacher_kl(tensors),
                            "teacher_seconds": time.perf_counter() - scored,
                        }
                    values = backend.train_step(tensors)
                    run.step += 1
                    run.policy_version += 1
                    self._set_state(RunState.SYNCING)
                    try:
                        synced = self.policy.push(run.policy_version)
                    except SyncFailed:
                        # The update is applied and will be in the failure checkpoint: ack its batch.
                        source.ack(batch.batch_id, run.policy_version)
                        raise
                    if self._base is not None and self._base.shared:
                        # The next turn is likely another run's thread, which cannot reuse what this one freed
                        # (docs/design/trainer-heap-trim.md). A run alone skips it: its next step reuses the memory.
                        release_freed_memory()
                source.ack(batch.batch_id, run.policy_version)
                values.update(
                    _batch_values(tensors.rewards, tensors.policy_versions, run.policy_version - 1)
                )
                values.update(token_accounting(batch.stats))
                values.update(teacher_values)
                values.update(wait_seconds=wait_seconds, base_wait_seconds=base_wait_seconds, sync_seconds=synced.durations_s["total"],
                              sync_max_logprob_diff=synced.max_logprob_diff, policy_version=run.policy_version)  # fmt: skip
                for phase, seconds in synced.durations_s.items():
                    values[f"sync_{phase}_seconds"] = seconds
                record = self.metrics.append(run.run_id, run.step, values)
                self._history.record_step(record, step_batch(run.run_id, run.step, batch, tensors, settings.advantage_estimator,
                                                            backend.signal_weights))  # fmt: skip
                log.info(
                    "step",
                    run_id=run.run_id,
                    step=run.step,
                    **{k: round(v, 6) for k, v in values.items()},
                )
                progress.set_postfix(
                    reward=f"{values['reward_mean']:.3f}",
                    loss=f"{values['policy_loss']:.4f}",
                    refresh=False,
                )
                progress.update(1)
                if settings.checkpoint_interval and run.step % settings.checkpoint_interval == 0:
                    with self.policy.lock:
                        checkpoints.save(run, backend, self.metrics)
        finally:
            progress.close()
        with self.policy.lock:
            checkpoints.save(run, backend, self.metrics)
        return RunState.COMPLETED if run.step >= settings.total_steps else RunState.STOPPED

    def _fail(self, backend: TrainingBackend | None, error: Exception) -> None:
        run = self.run
        message = (
            str(error) if isinstance(error, ParityError) else f"{type(error).__name__}: {error}"
        )
        log.error("run_failed", run_id=run.run_id, step=run.step, error=message)
        run.error = message
        if backend is not None:
            try:
                with self.policy.lock:
                    saved = checkpoints.save(run, backend, self.metrics)
                run.error += f" (resumable from checkpoint {saved.checkpoint_id})"
            except Exception as save_error:  # noqa: BLE001 - the original failure is what the user needs
                log.error("failure_checkpoint_failed", run_id=run.run_id, error=str(save_error))

    def _release_traffic(self) -> None:
        """Never leave agents held: a run that ends mid-step (sync mode holds traffic while training) resumes it."""
        try:
            self.policy.weight_sync.release()
        except SyncFailed as error:
            log.error("resume_traffic_failed", error=str(error))

    def _plot(self) -> None:
        run = self.run
        if not self.metrics.records:
            return
        path = run.settings.checkpoint_dir / run.run_id / PLOT_FILE
        try:
            run.plot_path = str(
                plot_run(self.metrics.records, path, f"{run.run_id}: reward and loss per step")
            )
        except Exception as error:  # noqa: BLE001 - a plot never fails a run
            log.error("plot_failed", error=str(error))

    def _set_state(self, state: RunState) -> None:
        self.run.state = state
        self.run.update_time = time.time()
        self._history.save(self.run)


def _batch_values(
    rewards: np.ndarray, versions: np.ndarray, trained_version: int
) -> dict[str, float]:
    return {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "sample_count": float(len(rewards)),
        "policy_lag_max": float(max(0, trained_version - int(versions.min()))),
    }


def token_accounting(stats: batch_pb2.BatchStats) -> dict[str, float]:
    """What prefix merging saved and what splits cost, per batch: tokens trained, those tokens counted once, their
    ratio, the share of call-to-call joins that merged, and the splits by reason; and the batch's groups (fewer
    than asked for in a short batch) and its episodes cut short at a session cap (trained on, or dropped); for agents
    whose sessions interleave threads (subagents), threads per session and the most any thread repeated."""
    values = {
        "tokens_trained": float(stats.token_count),
        "tokens_unique": float(stats.unique_token_count),
        "token_repetition": stats.token_count / stats.unique_token_count
        if stats.unique_token_count
        else 1.0,
    }
    values |= {"merged_calls": float(stats.merged_call_count), "splits": float(stats.split_count),
               "groups": float(stats.group_count),
               "capped_episodes": float(stats.capped_episode_count + stats.filtered_counts.get("capped_episode", 0))}  # fmt: skip
    joins = stats.merged_call_count + stats.split_count
    if joins:
        values["merge_rate"] = stats.merged_call_count / joins
    values |= {
        f"splits_{reason}": float(count) for reason, count in sorted(stats.split_reasons.items())
    }
    if stats.thread_count:
        values |= {"threads_per_session": stats.threads_per_session,
                   "thread_token_repetition_max": stats.max_thread_repetition,
                   "threads_ended_at_limit": float(stats.threads_ended_at_limit)}  # fmt: skip
    return values

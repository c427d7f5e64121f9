"""Checkpoints on disk: one folder per checkpoint holding the backend's state and the run's.

Layout: `<checkpoint_dir>/<run_id>/step-000012/` with the weights (safetensors, so
vLLM could serve them), the backend's optimizer state, `metrics.jsonl` and `checkpoint.json`
(run id, step, policy version, settings, consumed batch ids). A folder is written
under a temporary name and renamed, so a crash never leaves half a checkpoint.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from parity.services.runtime.errors import NotFound
from parity.services.trainer.backends.base import TrainingBackend
from parity.services.trainer.run_settings import RunSettings
from parity.services.trainer.run_status import RunStatus
from parity.services.trainer.step_metrics import MetricsLog

log = structlog.get_logger(__name__)

MANIFEST = "checkpoint.json"
METRICS = "metrics.jsonl"


@dataclass(frozen=True)
class CheckpointInfo:
    checkpoint_id: str
    """`<run_id>/step-NNNNNN`, unique under one checkpoint root."""
    run_id: str
    step: int
    policy_version: int
    path: Path
    create_time: float
    settings: RunSettings

    @classmethod
    def read(cls, path: Path, root: Path) -> CheckpointInfo:
        data = json.loads((path / MANIFEST).read_text())
        return cls(
            checkpoint_id=str(path.relative_to(root)), run_id=data["run_id"], step=data["step"],
            policy_version=data["policy_version"], path=path, create_time=data["create_time"],
            settings=RunSettings.from_json(data["settings"]),
        )  # fmt: skip


def checkpoint_path(root: Path, run_id: str, step: int) -> Path:
    return root / run_id / f"step-{step:06d}"


def write_manifest(
    directory: Path, run_id: str, step: int, policy_version: int, settings: RunSettings
) -> None:
    manifest = {"run_id": run_id, "step": step, "policy_version": policy_version, "create_time": time.time(),
                "settings": settings.to_json()}  # fmt: skip
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2))


def commit(staging: Path, final: Path) -> None:
    """Atomically put a fully written staging folder in place of `final`."""
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)


def save(run: RunStatus, backend: TrainingBackend, metrics: MetricsLog) -> CheckpointInfo:
    """The run's state now, with its metrics to resume from, as its checkpoint at this step."""
    root = run.settings.checkpoint_dir
    final = checkpoint_path(root, run.run_id, run.step)
    staging = final.with_name(final.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    backend.save_state(staging)
    metrics.write_jsonl(staging / METRICS)
    write_manifest(staging, run.run_id, run.step, run.policy_version, run.settings)
    commit(staging, final)
    log.info("checkpoint_saved", run_id=run.run_id, step=run.step, path=str(final))
    return CheckpointInfo.read(final, root)


def list_checkpoints(root: Path, run_id: str = "") -> list[CheckpointInfo]:
    """Newest first; folders without a manifest (interrupted writes) are skipped."""
    if not root.exists():
        return []
    found = [
        CheckpointInfo.read(manifest.parent, root)
        for manifest in root.glob(f"{run_id or '*'}/step-*/{MANIFEST}")
        if not manifest.parent.name.endswith(".partial")
    ]
    return sorted(found, key=lambda c: (c.create_time, c.step), reverse=True)


def find_checkpoint(root: Path, checkpoint_id: str) -> CheckpointInfo:
    path = (root / checkpoint_id).resolve()
    if root.resolve() not in path.parents or not (path / MANIFEST).exists():
        raise NotFound(f"no checkpoint {checkpoint_id!r} under {root}")
    return CheckpointInfo.read(path, root.resolve())

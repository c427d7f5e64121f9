"""Every run a trainer has started, on disk beside its work, so ListRuns, GetRun and a
run's metrics, validations and batches outlive the trainer process and the run.

Layout, under `<work_dir>/runs/<run_id>/`:

| file | holds |
|---|---|
| `run.json` | the run's status and settings, rewritten whenever its state changes |
| `metrics.jsonl` | one line per training step: the metrics the step recorded |
| `validation.jsonl` | one line per validation (WriteValidationMetrics), in step order |
| `batches/step-NNNNNN.pb` | the `StepBatch` the step trained on |
| `lineage.jsonl` | one line per training step: the sessions it trained on, and their end users (lineage.py) |

Checkpoints keep their own copy of the metrics (to resume from); this history is what a
reader sees, and it holds runs whose checkpoints live anywhere (each run names its own
checkpoint directory).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from parity.api.trainer.v1 import trainer_service_pb2 as pb
from parity.services.trainer import lineage
from parity.services.trainer.run_settings import RunSettings
from parity.services.trainer.run_status import RunState, RunStatus
from parity.services.trainer.step_metrics import StepRecord

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
VALIDATION_FILE = "validation.jsonl"
BATCHES_DIR = "batches"


class RunHistory:
    def __init__(self, root: Path) -> None:
        self.root = root

    def save(self, run: RunStatus) -> None:
        """Write the run's status; readers never see a half-written file."""
        folder = self._folder(run.run_id)
        folder.mkdir(parents=True, exist_ok=True)
        status = {"run_id": run.run_id, "settings": run.settings.to_json(), "state": run.state.value,
                  "step": run.step, "policy_version": run.policy_version, "error": run.error,
                  "start_time": run.start_time, "update_time": run.update_time, "plot_path": run.plot_path,
                  "served_model": run.served_model}  # fmt: skip
        _replace(folder / RUN_FILE, json.dumps(status, indent=2))

    def start(self, run: RunStatus, metrics: list[StepRecord]) -> None:
        """A new run, or a resumed one with the metrics its checkpoint restored: steps past the
        one it resumes from are trained again, so what the history holds of them goes."""
        self.save(run)
        folder = self._folder(run.run_id)
        _replace(folder / METRICS_FILE, "".join(_line(r) for r in metrics))
        lineage_path = folder / lineage.LINEAGE_FILE
        if lineage_path.exists():
            kept = [
                line
                for line in lineage_path.read_text().splitlines(keepends=True)
                if json.loads(line)["step"] <= run.step
            ]
            _replace(lineage_path, "".join(kept))
        for batch in (folder / BATCHES_DIR).glob("step-*.pb"):
            if int(batch.stem.removeprefix("step-")) > run.step:
                batch.unlink()

    def runs(self) -> list[RunStatus]:
        """Newest first."""
        found = [self._read(path) for path in self.root.glob(f"*/{RUN_FILE}")]
        return sorted(found, key=lambda r: r.start_time, reverse=True)

    def get(self, run_id: str) -> RunStatus | None:
        path = self._folder(run_id) / RUN_FILE
        return self._read(path) if path.exists() else None

    def record_step(self, record: StepRecord, batch: pb.StepBatch) -> None:
        folder = self._folder(record.run_id)
        batches = folder / BATCHES_DIR
        batches.mkdir(parents=True, exist_ok=True)
        _replace(batches / f"step-{record.step:06d}.pb", batch.SerializeToString())
        with (folder / METRICS_FILE).open("a") as out:
            out.write(_line(record))
        with (folder / lineage.LINEAGE_FILE).open("a") as out:
            out.write(lineage.step_line(record.step, record.time, batch))

    def trained_sessions(
        self, end_user_id: str, session_ids: list[str]
    ) -> list[pb.TrainedSessionsStep]:
        return lineage.find(self.root, end_user_id, session_ids)

    def metrics(self, run_id: str) -> list[StepRecord]:
        return _read_lines(self._folder(run_id) / METRICS_FILE)

    def validations(self, run_id: str) -> list[StepRecord]:
        return _read_lines(self._folder(run_id) / VALIDATION_FILE)

    def record_validation(self, record: StepRecord) -> None:
        """Keeps one validation per step: a later one (a resumed run validating again) replaces it."""
        kept = [r for r in self.validations(record.run_id) if r.step != record.step]
        ordered = sorted([*kept, record], key=lambda r: r.step)
        _replace(self._folder(record.run_id) / VALIDATION_FILE, "".join(_line(r) for r in ordered))

    def batch(self, run_id: str, step: int) -> pb.StepBatch | None:
        path = self._folder(run_id) / BATCHES_DIR / f"step-{step:06d}.pb"
        return pb.StepBatch.FromString(path.read_bytes()) if path.exists() else None

    def _folder(self, run_id: str) -> Path:
        return self.root / run_id

    @staticmethod
    def _read(path: Path) -> RunStatus:
        data = json.loads(path.read_text())
        return RunStatus(
            run_id=data["run_id"], settings=RunSettings.from_json(data["settings"]), state=RunState(data["state"]),
            step=data["step"], policy_version=data["policy_version"], error=data["error"],
            start_time=data["start_time"], update_time=data["update_time"], plot_path=data["plot_path"],
            served_model=data.get("served_model", ""),
        )  # fmt: skip


def _line(record: StepRecord) -> str:
    return (
        json.dumps(
            {
                "run_id": record.run_id,
                "step": record.step,
                "time": record.time,
                "values": record.values,
            }
        )
        + "\n"
    )


def _read_lines(path: Path) -> list[StepRecord]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        data = json.loads(line)
        records.append(StepRecord(data["run_id"], data["step"], data["time"], data["values"]))
    return records


def _replace(path: Path, content: str | bytes) -> None:
    staging = path.with_name(path.name + ".partial")
    if isinstance(content, bytes):
        staging.write_bytes(content)
    else:
        staging.write_text(content)
    os.replace(staging, path)

"""Where a run's numbers go: RUN_DIR/metrics.jsonl always, TensorBoard event files, and W&B on request.

Every record is one step's values under a `kind`: `train` (the trainer's step
metrics) or `validation` (mean reward and pass@k). Keys in TensorBoard and W&B are
`train/reward_mean`, `validation/reward`, and so on, plotted against the step.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog

log = structlog.get_logger(__name__)

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


@dataclass(frozen=True)
class MetricRecord:
    kind: str
    step: int
    values: dict[str, float]
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "step": self.step, "time": self.time, **self.values}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MetricRecord:
        values = dict(data)
        return cls(values.pop("kind"), int(values.pop("step")), values, float(values.pop("time")))


class MetricSink(Protocol):
    def write(self, record: MetricRecord) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """metrics.jsonl, one line per record, flushed as written: readable while the run goes on."""

    def __init__(self, path: Path, keep_through_step: int | None = None) -> None:
        self.path = path
        # Resuming: the steps after the checkpoint are trained again, so their old lines go.
        kept = [
            r
            for r in read_metrics(path)
            if keep_through_step is not None and r.step <= keep_through_step
        ]
        self.records = kept
        self._file = path.open("w")
        for record in kept:
            self._file.write(json.dumps(record.to_json()) + "\n")
        self._file.flush()

    def write(self, record: MetricRecord) -> None:
        self.records.append(record)
        self._file.write(json.dumps(record.to_json()) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    """Scalar summaries in TensorBoard's event-file format, written with TensorBoard's own writer."""

    def __init__(self, directory: Path) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        directory.mkdir(parents=True, exist_ok=True)
        self._writer = EventFileWriter(str(directory))

    def write(self, record: MetricRecord) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        summary = summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(tag=f"{record.kind}/{key}", simple_value=value)
                for key, value in record.values.items()
            ]  # fmt: skip
        )
        self._writer.add_event(
            event_pb2.Event(wall_time=record.time, step=record.step, summary=summary)
        )
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """A W&B run; offline (files under RUN_DIR/wandb, `wandb sync` later) unless online is asked for."""

    def __init__(
        self, project: str, run_id: str, run_dir: Path, mode: str, config: dict[str, Any]
    ) -> None:
        import wandb

        online = mode == "online" or (mode == "auto" and bool(os.environ.get("WANDB_API_KEY")))
        self._run = wandb.init(
            project=project, id=run_id, name=run_id, dir=str(run_dir), mode="online" if online else "offline",
            config=config, resume="allow",
        )  # fmt: skip

    def write(self, record: MetricRecord) -> None:
        self._run.log(
            {f"{record.kind}/{key}": value for key, value in record.values.items()},
            step=record.step,
        )

    def close(self) -> None:
        self._run.finish()


class Tracker:
    """Fans records out to every sink; a failing optional sink is logged and dropped, never fatal."""

    def __init__(self, jsonl: JsonlSink, others: list[MetricSink]) -> None:
        self.jsonl = jsonl
        self.others = others

    def record(self, kind: str, step: int, values: dict[str, float]) -> MetricRecord:
        record = MetricRecord(kind, step, {k: float(v) for k, v in values.items()}, time.time())
        self.jsonl.write(record)
        for sink in list(self.others):
            try:
                sink.write(record)
            except Exception as error:  # noqa: BLE001 - tracking must not end a training run
                log.error("metrics_sink_failed", sink=type(sink).__name__, error=str(error))
                self.others.remove(sink)
        return record

    def records(self, kind: str) -> list[MetricRecord]:
        return [r for r in self.jsonl.records if r.kind == kind]

    def close(self) -> None:
        for sink in [*self.others, self.jsonl]:
            try:
                sink.close()
            except Exception as error:  # noqa: BLE001 - closing the rest matters more
                log.error("metrics_sink_close_failed", sink=type(sink).__name__, error=str(error))


def open_tracker(
    run_dir: Path, run_id: str, keep_through_step: int | None, wandb_project: str, wandb_mode: str,
    config: dict[str, Any],
) -> Tracker:  # fmt: skip
    """A run's tracker: RUN_DIR/metrics.jsonl (a resumed run's kept through `keep_through_step`), TensorBoard, and
    W&B when a project is named, with `config` as the run's settings there."""
    jsonl = JsonlSink(run_dir / METRICS_FILE, keep_through_step)
    others: list[MetricSink] = [TensorBoardSink(run_dir / TENSORBOARD_DIR)]
    if wandb_project:
        others.append(WandbSink(wandb_project, run_id, run_dir, wandb_mode, config))
    return Tracker(jsonl, others)


def read_metrics(path: Path) -> list[MetricRecord]:
    if not path.exists():
        return []
    return [
        MetricRecord.from_json(json.loads(line))
        for line in path.read_text().splitlines()
        if line.strip()
    ]

"""Per-step metrics: kept for StreamMetrics subscribers, logged, and plotted at the end of a run."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from parity.services.trainer.run_plot import plot_rewards


@dataclass(frozen=True)
class StepRecord:
    run_id: str
    step: int
    time: float
    values: dict[str, float]


@dataclass
class MetricsLog:
    """Append-only per-step metrics of a run, safe to read from any thread."""

    records: list[StepRecord] = field(default_factory=list)
    feed: MetricsLog | None = None
    """Where every record goes too: the trainer's log of all its runs' steps, for StreamMetrics."""
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def append(self, run_id: str, step: int, values: dict[str, float]) -> StepRecord:
        record = StepRecord(run_id, step, time.time(), dict(values))
        self._add(record)
        if self.feed is not None:
            self.feed._add(record)
        return record

    def _add(self, record: StepRecord) -> None:
        with self._changed:
            self.records.append(record)
            self._changed.notify_all()

    def reset(self, records: list[StepRecord] | None = None) -> None:
        with self._changed:
            self.records = list(records or [])
            self._changed.notify_all()

    def since(self, index: int, wait_s: float) -> list[StepRecord]:
        """Records from position `index` on; waits up to wait_s for one when there are none yet."""
        with self._changed:
            if len(self.records) <= index:
                self._changed.wait(wait_s)
            return self.records[index:]

    def write_jsonl(self, path: Path) -> None:
        with path.open("w") as out:
            for r in self.records:
                out.write(
                    json.dumps({"run_id": r.run_id, "step": r.step, "time": r.time, **r.values})
                    + "\n"
                )

    @staticmethod
    def read_jsonl(path: Path) -> list[StepRecord]:
        if not path.exists():
            return []
        records = []
        for line in path.read_text().splitlines():
            data = json.loads(line)
            records.append(StepRecord(data.pop("run_id"), data.pop("step"), data.pop("time"), data))
        return records


def plot_run(records: list[StepRecord], path: Path, title: str) -> Path:
    """A PNG of mean reward (with its std band) and policy loss per step."""
    return plot_rewards([r.step for r in records], [r.values for r in records], path, title)

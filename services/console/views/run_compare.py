"""Several runs side by side: their curves overlaid, one series per run, and where each stands.

Runs trained at once on one base model (LoRA runs, `Run.served_model`) take turns on it; their
`base_wait_seconds` per step says how long each waited for the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.services.console.upstream import Services
from parity.services.console.views.charts import Chart, Series, line_chart
from parity.services.console.views.runs import RunRow, all_metrics, points, run_row

# One colour per run (s0 ... s7 in console.css): more runs would share colours.
STYLES = tuple(f"s{i}" for i in range(8))
MAX_RUNS = len(STYLES)


@dataclass(frozen=True)
class ComparedRun:
    run: RunRow
    style: str
    reward: float | None
    """The latest step's training reward."""
    validation: float | None
    """The latest validation's reward."""
    base_wait: float | None
    """The latest step's wait for the shared base model, seconds."""
    base_wait_total: float | None


@dataclass(frozen=True)
class ComparePage:
    runs: list[ComparedRun]
    charts: list[Chart]

    @property
    def active(self) -> bool:
        return any(r.run.active for r in self.runs)


@dataclass(frozen=True)
class RunCurves:
    """What the trainer recorded of one run."""

    run: RunRow
    training: Sequence[trainer_pb.StepMetrics]
    validation: Sequence[trainer_pb.StepMetrics]


def parse_run_ids(values: Sequence[str]) -> list[str]:
    """The runs asked for, in their order, each once; ValueError when none or too many."""
    run_ids = list(dict.fromkeys(v.strip() for v in values if v.strip()))
    if not run_ids:
        raise ValueError(
            "no run to compare: name them as /runs/compare?run=RUN_ID&run=RUN_ID, or tick them on /runs"
        )
    if len(run_ids) > MAX_RUNS:
        raise ValueError(f"compare at most {MAX_RUNS} runs at once, got {len(run_ids)}")
    return run_ids


def compare_page(services: Services, run_ids: Sequence[str]) -> ComparePage:
    """Raises Missing (a 404 page) for a run the trainer does not know."""
    with ThreadPoolExecutor(len(run_ids)) as threads:
        return compare(list(threads.map(lambda run_id: _curves(services, run_id), run_ids)))


def compare(curves: Sequence[RunCurves]) -> ComparePage:
    styled = list(zip(curves, STYLES, strict=False))

    def chart(title: str, key: str, of: Callable[[RunCurves], Sequence[trainer_pb.StepMetrics]],
              unit: str = "") -> Chart:  # fmt: skip
        return line_chart(
            title,
            [Series(c.run.run_id, style, points(of(c), key)) for c, style in styled],
            unit=unit,
        )

    charts = [
        chart("training reward (mean)", "reward_mean", lambda c: c.training),
        chart("validation reward", "reward", lambda c: c.validation),
        chart(
            "wait for the shared base model, seconds",
            "base_wait_seconds",
            lambda c: c.training,
            "s",
        ),
    ]
    return ComparePage([_summary(c, style) for c, style in styled], charts)


def _summary(curves: RunCurves, style: str) -> ComparedRun:
    def last(metrics: Sequence[trainer_pb.StepMetrics], key: str) -> float | None:
        values = points(metrics, key)
        return values[-1][1] if values else None

    waits = [v for _, v in points(curves.training, "base_wait_seconds")]
    return ComparedRun(curves.run, style, last(curves.training, "reward_mean"),
                       last(curves.validation, "reward"), last(curves.training, "base_wait_seconds"),
                       sum(waits) if waits else None)  # fmt: skip


def _curves(services: Services, run_id: str) -> RunCurves:
    trainer = services.trainer
    run = trainer.read(trainer.client.get_run, trainer_pb.GetRunRequest(run_id=run_id)).run
    return RunCurves(
        run_row(run),
        all_metrics(services, run_id, trainer_pb.METRICS_KIND_TRAINING),
        all_metrics(services, run_id, trainer_pb.METRICS_KIND_VALIDATION),
    )

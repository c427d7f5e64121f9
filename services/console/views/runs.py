"""Runs as the trainer reports them: the list, and one run's state, curves and steps."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from google.protobuf.json_format import MessageToDict

from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.services.console.upstream import Services
from parity.services.console.views.charts import (
    Bars,
    Chart,
    Series,
    bar_chart,
    line_chart,
    sparkline,
)
from parity.services.console.views.format import enum_label, timestamp_text

ACTIVE_STATES = {run_pb2.RUN_STATE_STARTING, run_pb2.RUN_STATE_WAITING_FOR_DATA, run_pb2.RUN_STATE_TRAINING,
                 run_pb2.RUN_STATE_SYNCING, run_pb2.RUN_STATE_PAUSED}  # fmt: skip
SYNC_PHASES = ("pause", "push", "verify", "resume")
# The steps table's columns: (metric key, heading).
STEP_COLUMNS = (
    ("reward_mean", "reward"), ("reward_std", "± std"), ("policy_loss", "policy loss"), ("grad_norm", "grad norm"),
    ("entropy", "entropy"), ("kl", "KL"), ("clip_fraction", "clipped"), ("groups", "groups"), ("sample_count", "samples"),
    ("capped_episodes", "capped"),
    ("policy_lag_max", "lag"), ("tokens_trained", "tokens"), ("tokens_computed", "computed"),
    ("tokens_per_s", "tok/s"), ("sync_seconds", "sync s"),
    ("sync_max_logprob_diff", "probe Δ"), ("rollout_logprob_diff", "rollout Δ"),
)  # fmt: skip
_METRICS_PAGE = 1000
_RUNS_PAGE = 1000
_LIST_THREADS = 8
# An active run's card: a reward chart narrower than a run page's.
_CARD_WIDTH, _CARD_HEIGHT = 400, 150


@dataclass(frozen=True)
class RunRow:
    run_id: str
    state: str
    active: bool
    step: int
    total_steps: int
    policy_version: int
    started: str
    updated: str
    error: str
    model_path: str
    # The model name its agents ask for, when it trains beside other runs; empty otherwise.
    served_model: str


@dataclass(frozen=True)
class RunListRow:
    run: RunRow
    reward_first: float | None
    reward_last: float | None
    # The training reward per step as a sparkline path (120 x 24), empty before two steps.
    reward_path: str


@dataclass(frozen=True)
class ActiveRunCard:
    run: RunRow
    # The latest step's wait for the base model the active runs share (`base_wait_seconds`).
    base_wait: float | None
    reward: Chart


@dataclass(frozen=True)
class RunsListing:
    rows: list[RunListRow]
    next_token: str
    # Every active run, whichever page lists it; only the first page has them.
    active: list[ActiveRunCard]


@dataclass(frozen=True)
class StepRow:
    step: int
    time: str
    values: dict[str, float]
    validation: float | None


@dataclass
class RunPage:
    run: RunRow
    config: list[tuple[str, str]]
    charts: list[Chart]
    steps: list[StepRow]
    columns: Sequence[tuple[str, str]] = STEP_COLUMNS
    validations: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    last_sync: list[tuple[str, str, str]] = field(default_factory=list)
    """(replica, verified, largest probe difference) of the run's latest sync, while it is active."""


def run_row(run: run_pb2.Run) -> RunRow:
    return RunRow(
        run_id=run.run_id, state=enum_label(run_pb2.RunState, run.state, "RUN_STATE_"), active=run.state in ACTIVE_STATES,
        step=run.step, total_steps=run.config.total_steps, policy_version=run.policy_version,
        started=timestamp_text(run.start_time), updated=timestamp_text(run.update_time), error=run.error_message,
        model_path=run.config.model_path, served_model=run.served_model,
    )  # fmt: skip


def list_runs(services: Services, page_size: int, page_token: str) -> RunsListing:
    trainer = services.trainer
    response = trainer.read(
        trainer.client.list_runs,
        trainer_pb.ListRunsRequest(page_size=page_size, page_token=page_token),
    )
    # A long run may have been started before a page of newer ones: the first page looks through them all.
    every = [] if page_token else trainer.read_all(
        trainer.client.list_runs, trainer_pb.ListRunsRequest(page_size=_RUNS_PAGE), "runs")  # fmt: skip
    active = [run for run in every if run.state in ACTIVE_STATES]
    ids = list(dict.fromkeys(run.run_id for run in [*response.runs, *active]))
    with ThreadPoolExecutor(_LIST_THREADS) as threads:
        training = dict(zip(ids, threads.map(
            lambda run_id: all_metrics(services, run_id, trainer_pb.METRICS_KIND_TRAINING), ids), strict=True))  # fmt: skip

    def row(run: run_pb2.Run) -> RunListRow:
        rewards = [
            m.values["reward_mean"] for m in training[run.run_id] if "reward_mean" in m.values
        ]
        return RunListRow(run_row(run), rewards[0] if rewards else None, rewards[-1] if rewards else None,
                          sparkline(rewards))  # fmt: skip

    def card(run: run_pb2.Run) -> ActiveRunCard:
        steps = training[run.run_id]
        waits = [m.values["base_wait_seconds"] for m in steps if "base_wait_seconds" in m.values]
        reward = line_chart(
            "training reward", [reward_series(steps)], width=_CARD_WIDTH, height=_CARD_HEIGHT
        )
        return ActiveRunCard(run_row(run), waits[-1] if waits else None, reward)

    return RunsListing([row(run) for run in response.runs], response.next_page_token,
                       [card(run) for run in active])  # fmt: skip


def run_page(services: Services, run_id: str) -> RunPage:
    trainer = services.trainer
    run = trainer.read(trainer.client.get_run, trainer_pb.GetRunRequest(run_id=run_id)).run
    training = all_metrics(services, run_id, trainer_pb.METRICS_KIND_TRAINING)
    validation = all_metrics(services, run_id, trainer_pb.METRICS_KIND_VALIDATION)
    validation_at = {m.step: m.values.get("reward", math.nan) for m in validation}
    steps = [
        StepRow(m.step, timestamp_text(m.time), dict(m.values), validation_at.get(m.step))
        for m in training
    ]
    page = RunPage(run_row(run), _config(run.config), _charts(training, validation), list(reversed(steps)),
                   validations=[(m.step, _reward_first(m.values)) for m in validation])  # fmt: skip
    if page.run.active:
        # Several runs may be active at once: the latest started is not necessarily this one.
        status = trainer.read(trainer.client.get_status, trainer_pb.GetStatusRequest(run_id=run_id))
        page.last_sync = [(r.replica, "verified" if r.verified else f"refused: {r.error_message}",
                           f"{r.max_logprob_diff:.2e}") for r in status.last_sync.replicas]  # fmt: skip
    return page


def _reward_first(values: Mapping[str, float]) -> dict[str, float]:
    """A validation's values, reward first and the rest by name, so every row has one column order."""
    return {key: values[key] for key in sorted(values, key=lambda k: (k != "reward", k))}


def all_metrics(
    services: Services, run_id: str, kind: trainer_pb.MetricsKind
) -> list[trainer_pb.StepMetrics]:
    trainer = services.trainer
    request = trainer_pb.ListRunMetricsRequest(run_id=run_id, kind=kind, page_size=_METRICS_PAGE)
    return trainer.read_all(trainer.client.list_run_metrics, request, "metrics")


def _config(config: run_pb2.RunConfig) -> list[tuple[str, str]]:
    data = MessageToDict(config, preserving_proto_field_name=True)
    rows = []
    for key, value in data.items():
        field = run_pb2.RunConfig.DESCRIPTOR.fields_by_name[key]
        if field.enum_type is not None:
            # ADVANTAGE_ESTIMATOR_GRPO reads as grpo.
            prefix = (
                "".join(f"_{c}" if c.isupper() else c.upper() for c in field.enum_type.name).lstrip(
                    "_"
                )
                + "_"
            )
            value = str(value).removeprefix(prefix).lower()
        rows.append((key, str(value)))
    return rows


def points(metrics: Sequence[trainer_pb.StepMetrics], key: str) -> list[tuple[float, float]]:
    """(step, value) of each record that has `key`."""
    return [(m.step, m.values[key]) for m in metrics if key in m.values]


def reward_series(training: Sequence[trainer_pb.StepMetrics]) -> Series:
    """The training reward per step, mean ± std."""
    band = [(m.step, m.values["reward_mean"] - m.values.get("reward_std", 0.0),
             m.values["reward_mean"] + m.values.get("reward_std", 0.0)) for m in training if "reward_mean" in m.values]  # fmt: skip
    return Series("training reward (mean ± std)", "s0", points(training, "reward_mean"), band=band)


def _charts(
    training: Sequence[trainer_pb.StepMetrics], validation: Sequence[trainer_pb.StepMetrics]
) -> list[Chart]:
    reward = line_chart("reward", [
        reward_series(training),
        Series("validation reward", "s1", [(m.step, m.values["reward"]) for m in validation if "reward" in m.values],
               dots=True),
    ])  # fmt: skip
    loss = line_chart(
        "loss",
        [
            Series("policy loss", "s2", points(training, "policy_loss")),
            Series("KL", "s3", points(training, "kl")),
        ],
    )
    grad = line_chart(
        "gradient norm (before clipping)",
        [Series("grad norm", "s4", points(training, "grad_norm"))],
    )
    entropy = line_chart(
        "entropy of the policy on sampled tokens",
        [Series("entropy", "s5", points(training, "entropy"))],
    )
    sync = bar_chart("weight sync, seconds by phase", Bars(
        labels=SYNC_PHASES, styles=("b0", "b1", "b2", "b3"),
        stacks=[(m.step, [m.values.get(f"sync_{phase}_seconds", 0.0) for phase in SYNC_PHASES]) for m in training],
    ), unit="s")  # fmt: skip
    probe = line_chart("vLLM vs trainer logprobs after sync (largest |Δ|, log scale)", [
        Series("probe difference", "s6", points(training, "sync_max_logprob_diff")),
        Series("rollout logprob gap (mean)", "s7", points(training, "rollout_logprob_diff")),
    ], log_y=True)  # fmt: skip
    return [reward, loss, grad, entropy, sync, probe]

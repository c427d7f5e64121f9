"""How a run went, from what it tracked: the TrainResult `parity train` prints, and the reward plot."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parity.core.model_defaults import DEFAULT_MODEL
from parity.services.trainer.run_plot import plot_rewards
from parity.training import tracking
from parity.training.plateau import flat_reward_warning
from parity.training.result import StepResult, TrainResult
from parity.training.settings import TrainSettings
from parity.training.validation import ValidationResult

PLOT_FILE = "reward.png"


@dataclass
class RunOutcome:
    """Where the run stands as it reports: what the driver knows beyond its tracked metrics."""

    run_id: str
    state: str
    steps: int
    error: str
    run_dir: Path
    model_path: str
    """The base model's folder (what a LoRA adapter is served on)."""
    exported: str
    checkpoint: str
    wall_seconds: float
    stopped_early: str = ""
    promotion: str = ""


def train_result(
    outcome: RunOutcome, settings: TrainSettings, tracker: tracking.Tracker | None
) -> TrainResult:
    """The run's result; writes the reward plot into its folder when it trained a step."""
    records = tracker.records("train") if tracker else []
    train = [r for r in records if r.step > 0]
    window = max(1, min(5, len(train) // 3))
    rewards = [reward for r in train if (reward := r.values.get("reward_mean")) is not None]
    diffs = [
        r.values["sync_max_logprob_diff"] for r in train if "sync_max_logprob_diff" in r.values
    ]
    validation_records = tracker.records("validation") if tracker else []
    validation = [(r.step, r.values.get("reward", math.nan)) for r in validation_records]
    plot = ""
    if train:
        plot = str(plot_rewards([r.step for r in train], [r.values for r in train], outcome.run_dir / PLOT_FILE,
                                f"{outcome.run_id}: reward and loss per step", validation))  # fmt: skip
    resumable = outcome.state in ("failed", "stopped") and outcome.checkpoint
    return TrainResult(
        run_id=outcome.run_id, state=outcome.state if outcome.state != "running" else "stopped", steps=outcome.steps,
        error=outcome.error, reward_first=_mean(rewards[:window]), reward_last=_mean(rewards[-window:]),
        val_reward_before=validation[0][1] if validation else None,
        val_reward_after=validation[-1][1] if len(validation) > 1 else None,
        val_pass_before=_pass_rates(validation_records[0]) if validation_records else {},
        val_pass_after=_pass_rates(validation_records[-1]) if len(validation_records) > 1 else {},
        model=settings.model or DEFAULT_MODEL, learning_rate=settings.learning_rate,
        warning=flat_reward_warning(rewards, settings.learning_rate),
        max_sync_logprob_diff=max(diffs) if diffs else None, plot=plot, run_dir=str(outcome.run_dir),
        exported_model=outcome.exported,
        serve_command=serve_command(outcome.exported, settings, outcome.model_path, outcome.run_id) if outcome.exported else "",
        checkpoint=outcome.checkpoint,
        resume_command=f"parity train --resume {outcome.run_id} --output-dir {outcome.run_dir.parent}" if resumable else "",
        wall_seconds=outcome.wall_seconds, history_mode=settings.history_mode, stopped_early=outcome.stopped_early,
        promotion=outcome.promotion,
        short_steps=sum(r.values.get("groups", settings.groups_per_batch) < settings.groups_per_batch for r in train),
        capped_episodes=int(sum(r.values.get("capped_episodes", 0.0) for r in train)),
        store_sessions=_store_sessions(train) if settings.from_store else {},
        **_token_accounting(train),
    )  # fmt: skip


def progress_postfix(
    settings: TrainSettings, steps: Sequence[StepResult], step: StepResult | None, validation: ValidationResult | None
) -> dict[str, str]:  # fmt: skip
    """What the progress line shows after a step or a validation."""
    postfix = {}
    if step is not None:
        postfix["reward"] = f"{step.reward:.3f}"
        if "teacher_kl" in step.values:
            postfix["teacher_kl"] = f"{step.values['teacher_kl']:.3f}"
        if "store_sessions_used" in step.values:
            postfix["sessions"] = str(int(step.values["store_sessions_used"]))
        groups = int(step.values.get("groups", settings.groups_per_batch))
        if groups < settings.groups_per_batch:
            postfix["short batch"] = f"{groups}/{settings.groups_per_batch} groups"
        rewards = [s.reward for s in steps]
        if flat_reward_warning(rewards, settings.learning_rate):
            postfix["note"] = f"reward flat for {len(rewards)} steps"
    if validation is not None:
        postfix["val_reward"] = f"{validation.reward:.3f}"
    return postfix


def serve_command(exported: str, settings: TrainSettings, model_path: str, run_id: str) -> str:
    """How to serve the exported policy with vLLM."""
    if settings.lora_rank and not settings.lora_merge:
        # An adapter is served on its base model, under a name of its own.
        return f"parity vllm serve --model {model_path} --lora-rank {settings.lora_rank} --lora-modules {run_id}={exported}"
    return f"parity vllm serve --model {exported}"


def _pass_rates(record: tracking.MetricRecord) -> dict[str, float]:
    return {key: value for key, value in record.values.items() if key.startswith("pass@")}


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(sum(present) / len(present), 4) if present else None


def _store_sessions(records: list[tracking.MetricRecord]) -> dict[str, int]:
    """Sessions used and deleted over the run's steps; the reasons for skipping others, as the last step saw them."""
    counts = {"used": int(sum(r.values.get("store_sessions_used", 0.0) for r in records)),
              "deleted": int(sum(r.values.get("store_sessions_deleted", 0.0) for r in records))}  # fmt: skip
    if records:
        last = records[-1].values
        counts |= {
            key.removeprefix("store_"): int(value)
            for key, value in last.items()
            if key.startswith("store_skipped_")
        }
    return counts


def _token_accounting(records: list[tracking.MetricRecord]) -> dict[str, Any]:
    """The run's token accounting, summed over its steps' batches."""

    def total(key: str) -> int:
        return int(sum(r.values.get(key, 0.0) for r in records))

    merged, splits = total("merged_calls"), total("splits")
    reasons = sorted(
        {
            key.removeprefix("splits_")
            for r in records
            for key in r.values
            if key.startswith("splits_")
        }
    )
    return {"tokens_trained": total("tokens_trained"), "tokens_unique": total("tokens_unique"),
            "merge_rate": merged / (merged + splits) if merged + splits else None,
            "splits": {reason: total(f"splits_{reason}") for reason in reasons}}  # fmt: skip

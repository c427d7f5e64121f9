"""What a run hands back: each step's numbers, and the run's outcome as one JSON object."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepResult:
    step: int
    values: dict[str, float]
    """The trainer's step metrics: reward_mean, policy_loss, sync_max_logprob_diff, ..."""
    failed_rollouts: int = 0

    @property
    def reward(self) -> float:
        return self.values.get("reward_mean", math.nan)


@dataclass
class TrainResult:
    """The last line `parity train` prints, as JSON."""

    run_id: str
    state: str
    """completed, stopped or failed."""
    steps: int
    error: str = ""
    reward_first: float | None = None
    reward_last: float | None = None
    val_reward_before: float | None = None
    val_reward_after: float | None = None
    val_pass_before: dict[str, float] = field(default_factory=dict)
    """pass@1 and pass@k (k = val_samples) on the validation tasks before training."""
    val_pass_after: dict[str, float] = field(default_factory=dict)
    model: str = ""
    """The model trained: its name, or its folder."""
    learning_rate: float | None = None
    """The learning rate used: the one set, or the model's default."""
    warning: str = ""
    """Set when the training reward stayed flat for many steps."""
    stopped_early: str = ""
    """Why a completed run ended before its last step: every rollout earned the run's top reward."""
    short_steps: int = 0
    """Steps trained on fewer groups than groups_per_batch: the extra-task budget was spent, and the step
    trained on the groups whose rewards varied instead of ending the run."""
    capped_episodes: int = 0
    """Episodes ingest cut short at a session cap (session_max_calls and the like), trained on or dropped as
    capped_episodes says."""
    max_sync_logprob_diff: float | None = None
    plot: str = ""
    run_dir: str = ""
    exported_model: str = ""
    serve_command: str = ""
    checkpoint: str = ""
    """The latest checkpoint; `parity train --resume RUN_ID` continues from it."""
    resume_command: str = ""
    wall_seconds: float = 0.0
    history_mode: str = ""
    """How the rollouts' prompts were built: as_deployed or exact_history."""
    tokens_trained: int = 0
    """Tokens in every sample the run trained on."""
    tokens_unique: int = 0
    """The same tokens, counted once where a split made a sample repeat the one before it."""
    merge_rate: float | None = None
    """Of the joins between one call and the next in a trajectory, the share that prefix-merged; None without any."""
    splits: dict[str, int] = field(default_factory=dict)
    """Splits by reason: reply_rerendered, history_changed, history_cut."""
    store_sessions: dict[str, int] = field(default_factory=dict)
    """A from-store run's sessions: `used` (trained on), `deleted` (gone between choosing and adopting them),
    and, at the last look at the store, `skipped_<reason>` for each reason a session was not usable."""
    promotion: str = ""
    """With promote: what the trainer's gate decided about the run's last checkpoint, and why."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def token_repetition(self) -> float:
        """Tokens trained ÷ unique tokens: 1.0 when every multi-turn trajectory trained as one sequence."""
        return self.tokens_trained / self.tokens_unique if self.tokens_unique else 1.0

    @property
    def ok(self) -> bool:
        return self.state == "completed"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self) | {"token_repetition": round(self.token_repetition, 4)}
        extra = data.pop("extra")
        return {key: _finite(value) for key, value in {**data, **extra}.items()}


def _finite(value: Any) -> Any:
    """JSON has no NaN: an undefined number is null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value

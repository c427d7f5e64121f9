"""What `parity train` takes to train from stored production sessions, and to promote the result.

TrainSettings is made of these fields too: each is a flag, a TOML key and a keyword of
`parity.train()` like any other setting. What they need of the rest of the run (a deployed
stack with its store, no tasks, a step count) TrainSettings checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from parity.core.attribution import normalize_tags
from parity.core.feedback_rule import COMBINE, FeedbackRule, parse_weights
from parity.core.settings_fields import SettingsError, setting


# kw_only: TrainSettings' own fields keep their places as positional arguments.
@dataclass(frozen=True, kw_only=True)
class ProductionSettings:
    from_store: bool = setting(
        False,
        "train on stored production sessions (their calls and late feedback) instead of rolling out tasks; needs a deployed stack that names its store (docs/production.md)",
        group="production",
    )
    store_tags: str = setting(
        "",
        "from_store: only sessions carrying every one of these comma-separated tags",
        group="production",
    )
    store_min_policy_version: int | None = setting(
        None,
        "from_store: only sessions whose every call was sampled by this policy version or a later one",
        group="production",
    )
    store_max_age_hours: float | None = setting(
        None,
        "from_store: only sessions whose last call is at most this many hours old (older ones are skipped as too stale); none: any age",
        group="production",
    )
    store_max_policy_lag: int | None = setting(
        None,
        "from_store: skip sessions sampled more than this many policy versions behind the trainer's (too stale); none: any",
        group="production",
    )
    store_idle_minutes: float = setting(
        10.0,
        "from_store: a session counts as ended once it had no call for this long",
        group="production",
    )
    feedback_rule: str = setting(
        "sum",
        "from_store: how a session's counted feedback signals combine into its reward: sum, mean, min, max, or last",
        choices=COMBINE,
        group="production",
    )
    feedback_weights: str = setting(
        "",
        "from_store: NAME=WEIGHT pairs (thumbs_up=1,thumbs_down=-1): only these signals count, each times its weight; empty: every signal, weight 1",
        group="production",
    )
    feedback_window_hours: float | None = setting(
        None,
        "from_store: wait this long after a session's last call for its feedback and ignore later signals; none: a session is ready once it has feedback",
        group="production",
    )
    feedback_default: float | None = setting(
        None,
        "from_store: the reward of a session whose feedback window closed with no signal; none: leave it out",
        group="production",
    )
    continuous: bool = setting(
        False,
        "from_store: when the store has too few sessions for the next step, wait for new ones instead of ending",
        group="production",
    )
    store_poll_s: float = setting(
        30.0, "from_store with continuous: how often to look for new sessions", group="production"
    )
    promote: bool = setting(
        False,
        "after the run, serve its last checkpoint to users if it passes the trainer's gate (its last validation no worse than step 0's, less promote_margin); needs val_tasks and a trainer with serving replicas (docs/production.md)",
        group="production",
    )
    promote_metric: str = setting(
        "pass@1",
        "promote: the validation metric the gate compares (reward, pass@1, pass@k)",
        group="production",
    )
    promote_margin: float = setting(
        0.0,
        "promote: how far the candidate's value may fall below step 0's (the model the run started from, which must be what serves) and still pass",
        group="production",
    )
    promote_model: str = setting(
        "",
        "promote: serve the LoRA run's adapter under this model name, only to the users whose agents ask for it (one tenant's); empty: to every user",
        group="production",
    )

    def _check_production(self, lora_rank: int) -> None:
        for key in ("store_min_policy_version", "store_max_policy_lag", "store_idle_minutes"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise SettingsError(key, f"must not be negative, got {value}")
        for key in ("store_max_age_hours", "feedback_window_hours", "store_poll_s"):
            value = getattr(self, key)
            if value is not None and not value > 0:
                raise SettingsError(key, f"must be greater than 0, got {value}")
        try:
            self.store_tag_list  # noqa: B018 (the property checks each tag)
        except ValueError as error:
            raise SettingsError("store_tags", str(error)) from None
        try:
            parse_weights(self.feedback_weights)
        except ValueError as error:
            raise SettingsError("feedback_weights", str(error)) from None
        if self.feedback_default is not None and not math.isfinite(self.feedback_default):
            raise SettingsError(
                "feedback_default", f"must be a finite number, got {self.feedback_default}"
            )
        if self.feedback_default is not None and self.feedback_window_hours is None:
            raise SettingsError(
                "feedback_default",
                "applies once a session's feedback window closes; set feedback_window_hours too",
            )
        if not math.isfinite(self.promote_margin) or self.promote_margin < 0:
            raise SettingsError(
                "promote_margin", f"must be a finite number >= 0, got {self.promote_margin}"
            )
        if self.promote_model and not (self.promote and lora_rank):
            raise SettingsError(
                "promote_model",
                "serves a promoted LoRA adapter under its own model name; set promote and lora_rank too",
            )
        if self.continuous and not self.from_store:
            raise SettingsError("continuous", "waits for new stored sessions; it needs from_store")

    @property
    def store_tag_list(self) -> tuple[str, ...]:
        """store_tags as the store filters by them: sorted, without repeats (ValueError for a bad tag)."""
        return normalize_tags(tag.strip() for tag in self.store_tags.split(",") if tag.strip())

    @property
    def feedback(self) -> FeedbackRule:
        """The rule that turns a stored session's feedback into its reward (from_store)."""
        window = (
            timedelta(hours=self.feedback_window_hours)
            if self.feedback_window_hours is not None
            else None
        )
        return FeedbackRule(
            self.feedback_rule, parse_weights(self.feedback_weights), window, self.feedback_default
        )

"""How a session's late feedback becomes the one reward a run trains it with.

A deployed session can collect several signals (a thumbs-up, "resolved", a thumbs-down on
one call), each a named reward that arrived whenever its sender knew. A run's rule says
which signals count and with what weight, how they combine, how long to wait for them,
and what a session that got none within that wait is worth (or that it is left out).
Both the run that picks stored sessions and the console read signals through this one
definition.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from parity.api.common.v1 import reward_pb2

FEEDBACK_SOURCE = "feedback"
"""The source ingest and the SDK give feedback; a named reward is feedback whatever its source."""

_COMBINERS: dict[str, Callable[[list[float]], float]] = {
    "sum": lambda v: float(sum(v)), "mean": lambda v: sum(v) / len(v), "min": min, "max": max, "last": lambda v: v[-1],
}  # fmt: skip
COMBINE = tuple(_COMBINERS)
_WEIGHT = re.compile(r"\s*([^=,\s][^=,]*?)\s*=\s*([^,]+?)\s*")


def is_feedback(reward: reward_pb2.Reward) -> bool:
    return bool(reward.name) or reward.source == FEEDBACK_SOURCE


def parse_weights(text: str) -> dict[str, float]:
    """`thumbs_up=1,thumbs_down=-1,resolved=2` as a mapping; raises ValueError naming the bad pair."""
    weights: dict[str, float] = {}
    for part in filter(str.strip, text.split(",")):
        match = _WEIGHT.fullmatch(part)
        if match is None:
            raise ValueError(
                f"expected NAME=WEIGHT pairs separated by commas, got {part.strip()!r}"
            )
        name, raw = match.groups()
        try:
            weight = float(raw)
        except ValueError:
            raise ValueError(f"the weight of {name!r} must be a number, got {raw!r}") from None
        if not math.isfinite(weight):
            raise ValueError(f"the weight of {name!r} must be finite, got {raw!r}")
        if name in weights:
            raise ValueError(f"{name!r} is weighted twice")
        weights[name] = weight
    return weights


@dataclass(frozen=True)
class FeedbackRule:
    combine: str = "sum"
    """How the counted signals' weighted values combine: sum, mean, min, max, or last (the latest to arrive)."""
    weights: Mapping[str, float] = field(default_factory=dict)
    """Signal name to weight; only these names count. Empty: every signal counts, with weight 1."""
    window: timedelta | None = None
    """How long after a session's last call its feedback may arrive; later signals do not count. None: no
    limit, and a session is ready as soon as it has a counted signal."""
    default: float | None = None
    """The reward of a session whose window closed without a counted signal; None leaves it out."""

    def __post_init__(self) -> None:
        if self.combine not in COMBINE:
            raise ValueError(f"combine must be one of {', '.join(COMBINE)}, got {self.combine!r}")
        if self.window is not None and self.window <= timedelta(0):
            raise ValueError(f"the feedback window must be positive, got {self.window}")
        if self.default is not None and (self.window is None or not math.isfinite(self.default)):
            raise ValueError(
                "a default reward needs a finite value and a feedback window to wait out"
            )

    def decide(
        self, rewards: Iterable[reward_pb2.Reward], last_call: datetime, now: datetime
    ) -> Decision:
        """The session's reward by this rule, or why it has none yet (awaiting_feedback) or none at all."""
        closes = last_call + self.window if self.window is not None else None
        if closes is not None and now < closes:
            return Decision(None, "awaiting_feedback")
        counted = [
            r for r in rewards
            if is_feedback(r) and (not self.weights or r.name in self.weights)
            and (closes is None or r.create_time.ToDatetime(last_call.tzinfo) <= closes)
        ]  # fmt: skip
        if not counted:
            if self.default is not None:
                return Decision(self.default, "", signals=0)
            return Decision(None, "no_feedback")
        counted.sort(key=lambda r: (r.create_time.seconds, r.create_time.nanos))
        values = [r.value * self.weights.get(r.name, 1.0) for r in counted]
        return Decision(_COMBINERS[self.combine](values), "", signals=len(counted))


@dataclass(frozen=True)
class Decision:
    reward: float | None
    """The session's reward; None when it gets none (see `skip`)."""
    skip: str
    """Why there is no reward: awaiting_feedback (its window is still open) or no_feedback."""
    signals: int = 0

"""Caps on one session's use of the policy, which ingest enforces: calls, tokens and wall seconds.

A black-box agent stops when its framework decides to. A budget stops it sooner: once a
session has made `calls` policy calls, used `tokens` tokens (prompt plus completion, summed
over its calls) or `completion_tokens` sampled tokens, or run `seconds` since its first
call, ingest refuses its next call, in the called API's own error shape, and records which
cap it reached. `context` says what becomes of a call whose prompt and requested reply
length together exceed the model's context: `clamp` (vLLM cuts the reply to fit, ending
with `finish_reason: length`) or `refuse` (the call is refused like a prompt past the
context, and recorded as the session's `context` cap). Caps travel in the session's slug
(set by a run or `parity.session`) and in the `X-Parity-Budget` header (`calls=3,
tokens=20000, context=refuse`); where both set a cap the tighter holds, and where neither
does, ingest's serving default does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

HEADER = "X-Parity-Budget"
CAPS = ("calls", "tokens", "completion_tokens", "seconds")
# What a call does whose prompt fits the context but whose max_tokens would run past it; refuse is the tighter.
CONTEXT_POLICIES = ("clamp", "refuse")
_FIELDS = (*CAPS, "context")
# The error type of ingest's refusal (OpenAI shape; Anthropic's says invalid_request_error), as agents' exceptions show it.
REFUSAL_TYPE = "session_budget_exceeded"


@dataclass(frozen=True)
class SessionBudget:
    calls: int | None = None
    """Policy calls the session may make."""
    tokens: int | None = None
    """Prompt and completion tokens, summed over the session's calls."""
    completion_tokens: int | None = None
    """Sampled tokens, summed over the session's calls."""
    seconds: float | None = None
    """Wall seconds from the session's first call."""
    context: str | None = None
    """One of CONTEXT_POLICIES: a call whose prompt plus max_tokens exceeds the context is cut to fit or refused."""

    def __post_init__(self) -> None:
        for name in ("calls", "tokens", "completion_tokens"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(
                    f"budget {name} must be a whole number of at least 1, got {value!r}"
                )
        seconds = self.seconds
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float)
                                    or not 0 < seconds < math.inf):  # fmt: skip
            raise ValueError(f"budget seconds must be a positive number, got {seconds!r}")
        if self.context is not None and self.context not in CONTEXT_POLICIES:
            raise ValueError(
                f"budget context must be one of {', '.join(CONTEXT_POLICIES)}, got {self.context!r}"
            )

    def __bool__(self) -> bool:
        return any(getattr(self, name) is not None for name in _FIELDS)

    @property
    def counts(self) -> bool:
        """Whether any cap needs the session's use counted (a context policy needs none)."""
        return any(getattr(self, name) is not None for name in CAPS)

    def tightest(self, other: SessionBudget | None) -> SessionBudget:
        """Each cap at the lower of the two where both set it, else whichever sets it."""
        if other is None:
            return self
        values = {}
        for name in CAPS:
            mine, theirs = getattr(self, name), getattr(other, name)
            values[name] = theirs if mine is None else mine if theirs is None else min(mine, theirs)
        contexts = {self.context, other.context} - {None}
        return SessionBudget(
            **values, context="refuse" if "refuse" in contexts else next(iter(contexts), None)
        )

    def or_default(self, default: SessionBudget) -> SessionBudget:
        """Each cap this budget leaves unset taken from `default`."""
        return SessionBudget(**{name: getattr(self, name) if getattr(self, name) is not None else getattr(default, name)
                                for name in _FIELDS})  # fmt: skip

    def to_json(self) -> dict[str, float | str]:
        return {name: value for name, value in asdict(self).items() if value is not None}

    @classmethod
    def from_json(cls, document: object) -> SessionBudget:
        """A budget from its JSON object; ValueError naming what is wrong."""
        if not isinstance(document, Mapping) or not all(isinstance(key, str) for key in document):
            raise ValueError("a session budget must be an object of caps")
        unknown = sorted(set(document) - set(_FIELDS))
        if unknown:
            raise ValueError(
                f"unknown session budget cap {unknown[0]!r}; the caps are {', '.join(_FIELDS)}"
            )
        values: dict[str, Any] = {name: _whole(name, value) for name, value in document.items()}
        return cls(**values)

    def header(self) -> str:
        return ", ".join(f"{name}={value}" if isinstance(value, str) else f"{name}={value:g}"
                         for name, value in self.to_json().items())  # fmt: skip

    @classmethod
    def parse_header(cls, text: str) -> SessionBudget:
        """`calls=3, tokens=20000, context=refuse`; ValueError naming what is wrong."""
        values: dict[str, float | str] = {}
        for part in filter(None, (item.strip() for item in text.split(","))):
            name, sep, number = (piece.strip() for piece in part.partition("="))
            if not sep:
                raise ValueError(f"{HEADER}: {part!r} is not NAME=VALUE")
            if name == "context":
                values[name] = number
                continue
            try:
                values[name] = float(number)
            except ValueError:
                raise ValueError(f"{HEADER}: {name} must be a number, got {number!r}") from None
        return cls.from_json(values)


def _whole(name: str, value: object) -> object:
    """Counts given as 3.0 (JSON, a header) are the whole numbers they spell; anything else is checked as given."""
    if name != "seconds" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value

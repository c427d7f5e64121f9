"""The ledger of each capped session's use of the policy, and the refusal of its calls past a cap.

A session's budget (parity/core/session_budget.py) is the tighter of its slug's and its header's caps,
else ingest's serving default. Calls count when admitted, so calls a session makes at once cannot all
slip past a call cap; tokens count when a call is recorded, so a token cap stops the call after the
one that crossed it. Sessions with no budget are not tracked at all, nor are calls that named no
session: they are every such agent's at once. Usage lives in memory, the least recently called
session forgotten first past MAX_SESSIONS: a fleet of ingests routes a session to one replica, and a
session forgotten (or moved after a restart) starts counting again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from parity.api.common.v1 import llm_call_pb2
from parity.core.session_budget import SessionBudget
from parity.core.session_slug import UNASSIGNED, SessionRef

MAX_SESSIONS = 200_000
_UNITS = {
    "calls": "calls",
    "tokens": "tokens",
    "completion_tokens": "completion tokens",
    "seconds": "seconds",
}


class SessionCapped(Exception):
    """The session reached `cap`; the message is what the agent hears."""

    def __init__(self, session_id: str, cap: str, limit: float) -> None:
        super().__init__(f"session {session_id!r} reached its cap of {limit:g} {_UNITS[cap]} ({cap}); "
                         "ingest serves it no more calls")  # fmt: skip
        self.cap = cap


@dataclass
class SessionUsage:
    budget: SessionBudget
    started: float
    calls: int = 0
    tokens: int = 0
    completion_tokens: int = 0

    def reached(self, session_id: str) -> SessionCapped | None:
        budget = self.budget
        elapsed = time.monotonic() - self.started
        for cap, used in (("calls", self.calls), ("tokens", self.tokens),
                          ("completion_tokens", self.completion_tokens), ("seconds", elapsed)):  # fmt: skip
            limit = getattr(budget, cap)
            if limit is not None and used >= limit:
                return SessionCapped(session_id, cap, limit)
        return None

    def record(self, call: llm_call_pb2.LlmCall) -> None:
        self.tokens += call.usage.prompt_tokens + call.usage.completion_tokens
        self.completion_tokens += call.usage.completion_tokens


class BudgetLedger:
    """Each capped session's usage, keyed by session id: what admits a call or refuses it."""

    def __init__(self, default: SessionBudget) -> None:
        self.default = default
        self._any_default = default.counts
        self._usage: OrderedDict[str, SessionUsage] = OrderedDict()

    def admit(self, session: SessionRef) -> SessionUsage | None:
        """Count a call of `session` against its budget; None when it has none. Raises SessionCapped past a cap."""
        if session.budget is None and not self._any_default:
            # Every call of an uncapped deployment passes here: nothing to look up.
            return None
        budget = session.budget.or_default(self.default) if session.budget else self.default
        if not budget.counts or session.session_id == UNASSIGNED.session_id:
            return None
        usage = self._usage.get(session.session_id)
        if usage is None:
            usage = self._usage[session.session_id] = SessionUsage(budget, time.monotonic())
            if len(self._usage) > MAX_SESSIONS:
                self._usage.popitem(last=False)
        else:
            # A later call may name a tighter budget (a header added mid-session); never a looser one.
            usage.budget = usage.budget.tightest(budget)
            self._usage.move_to_end(session.session_id)
        capped = usage.reached(session.session_id)
        if capped is not None:
            raise capped
        usage.calls += 1
        return usage

    def context_policy(self, session: SessionRef) -> str:
        """What a call of `session` whose prompt and max_tokens overrun the context gets: "clamp" or "refuse"."""
        if session.budget is not None and session.budget.context is not None:
            return session.budget.context
        return self.default.context or "clamp"

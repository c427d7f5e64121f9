"""Ingest's count of each capped session: calls when admitted, tokens when recorded, seconds from the first call."""

from __future__ import annotations

import pytest

from parity.api.common.v1 import llm_call_pb2
from parity.core.session_budget import SessionBudget
from parity.core.session_slug import SessionRef
from parity.services.ingest.session_caps import budget_ledger
from parity.services.ingest.session_caps.budget_ledger import BudgetLedger, SessionCapped


def recorded(prompt_tokens: int, completion_tokens: int) -> llm_call_pb2.LlmCall:
    return llm_call_pb2.LlmCall(
        usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    )


def test_the_call_past_a_call_cap_is_refused_naming_the_cap_and_the_session() -> None:
    budgets = BudgetLedger(SessionBudget())
    ref = SessionRef("s1", budget=SessionBudget(calls=2))
    budgets.admit(ref)
    budgets.admit(ref)
    with pytest.raises(
        SessionCapped, match=r"session 's1' reached its cap of 2 calls \(calls\)"
    ) as capped:
        budgets.admit(ref)
    assert capped.value.cap == "calls"
    assert budgets.admit(SessionRef("s2", budget=SessionBudget(calls=2))) is not None, (
        "each session counts its own"
    )


def test_tokens_count_once_recorded_so_the_call_after_the_one_that_crossed_a_token_cap_is_refused() -> (
    None
):
    budgets = BudgetLedger(SessionBudget())
    ref = SessionRef("s1", budget=SessionBudget(tokens=100, completion_tokens=30))
    budgets.admit(ref).record(recorded(60, 20))  # type: ignore[union-attr]
    usage = budgets.admit(ref)
    assert usage is not None
    usage.record(recorded(70, 5))
    with pytest.raises(SessionCapped, match=r"cap of 100 tokens \(tokens\)"):
        budgets.admit(ref)
    completion = SessionRef("s2", budget=SessionBudget(completion_tokens=30))
    budgets.admit(completion).record(recorded(5, 30))  # type: ignore[union-attr]
    with pytest.raises(SessionCapped, match=r"cap of 30 completion tokens \(completion_tokens\)"):
        budgets.admit(completion)


def test_seconds_run_from_the_first_call(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(budget_ledger.time, "monotonic", lambda: now[0])
    budgets = BudgetLedger(SessionBudget())
    ref = SessionRef("s1", budget=SessionBudget(seconds=30))
    budgets.admit(ref)
    now[0] += 29.5
    budgets.admit(ref)
    now[0] += 0.5
    with pytest.raises(SessionCapped, match=r"cap of 30 seconds \(seconds\)"):
        budgets.admit(ref)


def test_the_serving_default_holds_where_a_session_sets_no_cap_and_calls_of_no_session_are_never_capped() -> (
    None
):
    budgets = BudgetLedger(SessionBudget(calls=1, tokens=10))
    own = SessionRef("own", budget=SessionBudget(calls=3))
    for _ in range(3):
        budgets.admit(own)
    with pytest.raises(SessionCapped, match="cap of 3 calls"):
        budgets.admit(own)
    budgets.admit(SessionRef("plain"))
    with pytest.raises(SessionCapped, match="cap of 1 calls"):
        budgets.admit(SessionRef("plain"))
    for _ in range(5):
        assert budgets.admit(SessionRef("unassigned")) is None
    assert BudgetLedger(SessionBudget()).admit(SessionRef("free")) is None, "no budget: not tracked"


def test_a_sessions_context_policy_holds_else_the_serving_defaults_and_a_policy_alone_is_not_counted() -> (
    None
):
    refusing = BudgetLedger(SessionBudget(context="refuse"))
    assert refusing.context_policy(SessionRef("plain")) == "refuse"
    assert (
        refusing.context_policy(SessionRef("own", budget=SessionBudget(calls=2, context="clamp")))
        == "clamp"
    )
    assert refusing.context_policy(SessionRef("capped", budget=SessionBudget(calls=2))) == "refuse"
    assert BudgetLedger(SessionBudget()).context_policy(SessionRef("plain")) == "clamp"
    assert refusing.admit(SessionRef("plain")) is None, (
        "a context policy caps no use: nothing to track"
    )


def test_a_later_call_may_tighten_a_sessions_budget_but_never_loosen_it() -> None:
    budgets = BudgetLedger(SessionBudget())
    budgets.admit(SessionRef("s1", budget=SessionBudget(calls=5)))
    budgets.admit(SessionRef("s1", budget=SessionBudget(calls=2)))
    with pytest.raises(SessionCapped, match="cap of 2 calls"):
        budgets.admit(SessionRef("s1", budget=SessionBudget(calls=9)))


def test_the_least_recently_called_session_is_forgotten_past_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(budget_ledger, "MAX_SESSIONS", 2)
    budgets = BudgetLedger(SessionBudget(calls=1))
    budgets.admit(SessionRef("a"))
    budgets.admit(SessionRef("b"))
    budgets.admit(SessionRef("c"))
    assert budgets.admit(SessionRef("a")) is not None, "a was forgotten, so it counts afresh"
    with pytest.raises(SessionCapped):
        budgets.admit(SessionRef("c"))

"""Session budgets as the SDK writes them and ingest reads them: the slug, the header, and how caps combine."""

from __future__ import annotations

import base64
import json

import pytest

from parity.core import session_slug
from parity.core.session_budget import SessionBudget
from parity.core.session_slug import SessionRef
from parity.sessions import current_session, session


def test_a_budget_travels_in_the_slug_and_the_header_and_back() -> None:
    budget = SessionBudget(calls=3, completion_tokens=400, seconds=2.5)
    ref = SessionRef("s1", budget=budget)
    assert session_slug.decode(session_slug.encode(ref)).budget == budget
    assert SessionBudget.parse_header(budget.header()) == budget
    assert SessionBudget.parse_header("calls=3.0 ,tokens = 20000") == SessionBudget(
        calls=3, tokens=20000
    )
    refusing = SessionBudget(calls=2, context="refuse")
    assert refusing.header() == "calls=2, context=refuse"
    assert SessionBudget.parse_header(refusing.header()) == refusing
    assert (
        session_slug.decode(session_slug.encode(SessionRef("s2", budget=refusing))).budget
        == refusing
    )


def test_the_tighter_cap_holds_where_both_set_one_and_the_default_fills_only_what_neither_sets() -> (
    None
):
    run, header = SessionBudget(calls=3, tokens=1000), SessionBudget(calls=10, seconds=60)
    assert header.tightest(run) == SessionBudget(calls=3, tokens=1000, seconds=60)
    assert SessionBudget(calls=3).or_default(SessionBudget(calls=1, tokens=5)) == SessionBudget(
        calls=3, tokens=5
    )
    assert not SessionBudget() and SessionBudget(seconds=1)


def test_refuse_is_the_tighter_context_policy_and_a_policy_alone_counts_nothing() -> None:
    clamp, refuse = SessionBudget(calls=3, context="clamp"), SessionBudget(context="refuse")
    assert (
        clamp.tightest(refuse) == refuse.tightest(clamp) == SessionBudget(calls=3, context="refuse")
    )
    assert SessionBudget(calls=3).tightest(clamp) == clamp
    assert SessionBudget(calls=1).or_default(SessionBudget(context="clamp")) == SessionBudget(
        calls=1, context="clamp"
    )
    assert refuse and not refuse.counts and clamp.counts


def test_a_nested_session_is_held_to_the_tighter_of_its_own_and_its_parents_budget() -> None:
    with session("outer", budget=SessionBudget(calls=4, tokens=100)):
        with session("inner", budget=SessionBudget(calls=9, completion_tokens=50)):
            inner = current_session()
        with session("plain"):
            plain = current_session()
    assert inner is not None and inner.budget == SessionBudget(
        calls=4, tokens=100, completion_tokens=50
    )
    assert plain is not None and plain.budget == SessionBudget(calls=4, tokens=100)


@pytest.mark.parametrize(("text", "message"), [
    ("calls=0", "budget calls must be a whole number of at least 1, got 0"),
    ("calls=2.5", "budget calls must be a whole number of at least 1, got 2.5"),
    ("seconds=-1", "budget seconds must be a positive number, got -1.0"),
    ("seconds=inf", "budget seconds must be a positive number, got inf"),
    ("turns=3", "unknown session budget cap 'turns'; the caps are calls, tokens, completion_tokens, seconds, context"),
    ("calls", "X-Parity-Budget: 'calls' is not NAME=VALUE"),
    ("context=cut", "budget context must be one of clamp, refuse, got 'cut'"),
    ("calls=many", "X-Parity-Budget: calls must be a number, got 'many'"),
])  # fmt: skip
def test_a_bad_budget_is_refused_naming_the_cap(text: str, message: str) -> None:
    with pytest.raises(
        ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")
    ):
        SessionBudget.parse_header(text)


def test_a_slug_with_a_bad_budget_is_refused_saying_where() -> None:
    document = json.dumps({"s": "s1", "b": {"calls": -1}}).encode()
    slug = session_slug.PREFIX + base64.urlsafe_b64encode(document).decode().rstrip("=")
    with pytest.raises(
        ValueError,
        match="session slug 'b': budget calls must be a whole number of at least 1, got -1",
    ):
        session_slug.decode(slug)

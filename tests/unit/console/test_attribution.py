"""Production sessions in the console: the session list filters by end user and tags and shows
them, and a session's page shows who it served, its tags and the feedback it got later, apart
from its reward; all of it as text."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from parity.api.common.v1 import llm_call_pb2, reward_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import RPCError
from parity.core import tokens
from parity.core.attribution import MAX_TAG_LENGTH, MAX_TAGS
from parity.core.feedback_rule import is_feedback
from parity.services.console.app import create_app
from parity.services.console.settings import ConsoleConfig
from parity.services.console.upstream import Services, Upstream
from parity.services.console.views.sessions import (
    SHOWN_TAGS,
    SessionFilters,
    parse_tag_filter,
    trajectory_rewards,
)

EVIL = '<script>window.__pwned = 1</script>"><img src=x onerror=alert(1)>'


def test_user_and_tags_become_the_store_query_and_a_canonical_link() -> None:
    filters, problems = SessionFilters.parse(
        {"user": " acct-8812 ", "tag": "prod, checkout,,prod ,"}
    )
    assert problems == []
    assert (filters.user, filters.tag, filters.tags) == (
        "acct-8812",
        "checkout,prod",
        ("checkout", "prod"),
    )
    request = filters.request(50, "")
    assert request.end_user_id == "acct-8812" and list(request.tags) == ["checkout", "prod"]
    assert filters.query() == "user=acct-8812&tag=checkout%2Cprod"
    assert filters.query_with_tag("beta") == "user=acct-8812&tag=beta%2Ccheckout%2Cprod"
    assert filters.query_with_tag("prod") == filters.query(), (
        "a tag already filtered on adds nothing"
    )
    assert filters.query(user="acct-9") == "user=acct-9&tag=checkout%2Cprod", (
        "a user link keeps the tags"
    )
    empty = SessionFilters.parse({})[0].request(5, "")
    assert empty.end_user_id == "" and list(empty.tags) == []


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ({"tag": "x" * (MAX_TAG_LENGTH + 1)}, "tag: tag 'xxxxxxxx"),
        ({"tag": "prod,bad\ttag"}, "tag: tag 'bad\\ttag' must be 1 to 64 characters"),
        (
            {"tag": ",".join(f"t{n}" for n in range(MAX_TAGS + 1))},
            f"tag holds {MAX_TAGS + 1} tags; at most {MAX_TAGS}",
        ),
        ({"user": "u" * 257}, "user is 257 characters; at most 256 are allowed"),
        ({"user": "acct\x00"}, "user 'acct\\x00' contains a control character"),
    ],
)
def test_bad_user_or_tag_text_is_a_problem_and_that_filter_is_left_out(
    query: dict[str, str], problem: str
) -> None:
    filters, problems = SessionFilters.parse({"run": "r1", **query})
    assert len(problems) == 1 and problems[0].startswith(problem), problems
    assert (filters.run, filters.user, filters.tag) == ("r1", "", "")
    request = filters.request(5, "")
    assert request.end_user_id == "" and list(request.tags) == []


@given(st.lists(st.text(min_size=1, max_size=MAX_TAG_LENGTH), max_size=MAX_TAGS))
def test_a_tag_filter_reads_back_as_the_same_tags(tags: list[str]) -> None:
    try:
        parsed = parse_tag_filter(", ".join(tags))
    except ValueError:
        return
    again = SessionFilters.parse({"tag": ",".join(parsed)})
    assert again == (SessionFilters(tag=",".join(parsed)), [])
    assert list(again[0].request(5, "").tags) == list(parsed) == sorted(set(parsed))


def reward(value: float, **fields: Any) -> reward_pb2.Reward:
    level = (
        reward_pb2.REWARD_LEVEL_STEP
        if "call_id" in fields or "step_index" in fields
        else reward_pb2.REWARD_LEVEL_TRAJECTORY
    )
    made = reward_pb2.Reward(
        reward_id=f"r{value}-{fields.get('name', '')}",
        session_id="s",
        level=level,
        value=value,
        **fields,
    )
    made.create_time.FromSeconds(1_800_000_000)
    return made


RUN_REWARD = reward(0.75, source="function:task.score")
THUMBS = reward(1.0, name="thumbs_up", source="feedback")
ON_CALL = reward(-1.0, name="thumbs_down", source="feedback", call_id="c0")
UNNAMED = reward(0.5, source="feedback")


def test_feedback_is_told_apart_from_the_runs_reward_and_summed_as_the_assembler_sums_it() -> None:
    assert [is_feedback(r) for r in (RUN_REWARD, THUMBS, ON_CALL, UNNAMED)] == [
        False,
        True,
        True,
        True,
    ]
    # Summed as the assembler sums a trajectory's rewards: feedback counts, though it is listed apart.
    assert trajectory_rewards([RUN_REWARD]) == {"": 0.75}
    assert trajectory_rewards([THUMBS]) == {"": THUMBS.value}


# The pages, over fake services.
def session(session_id: str, user: str = "", tags: tuple[str, ...] = ()) -> session_pb2.Session:
    made = session_pb2.Session(session_id=session_id, state=session_pb2.SESSION_STATE_CLOSED,
                               outcome=session_pb2.SESSION_OUTCOME_SUCCEEDED, call_count=1,
                               end_user_id=user, tags=list(tags))  # fmt: skip
    made.create_time.FromSeconds(1_800_000_000)
    return made


def call() -> llm_call_pb2.LlmCall:
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    made = llm_call_pb2.LlmCall(call_id="c0", session_id="s", model="m", prompt_token_ids=tokens.pack_token_ids([1, 2]),
                                request_json=json.dumps(request).encode(), end_user_id="acct-1", tags=["prod"])  # fmt: skip
    made.choices.add(
        index=0, token_ids=tokens.pack_token_ids([3]), logprobs=tokens.pack_floats([-0.1])
    )
    return made


SESSIONS = [
    session("s", "acct-1", ("beta", "checkout", "eu", "prod", "zz-canary")),
    session("bare"),
    session("evil", EVIL, (EVIL[:60].replace(",", ";"),)),
]
REWARDS = {"s": [RUN_REWARD, THUMBS, ON_CALL, UNNAMED]}


class FakeStore:
    """The store's typed client, as far as the session pages call it: real messages in and out."""

    def __init__(self) -> None:
        self.asked: list[store_pb.ListSessionsRequest] = []

    def list_sessions(self, request: store_pb.ListSessionsRequest) -> store_pb.ListSessionsResponse:
        self.asked.append(request)
        return store_pb.ListSessionsResponse(sessions=SESSIONS)

    def batch_get_sessions(
        self, request: store_pb.BatchGetSessionsRequest
    ) -> store_pb.BatchGetSessionsResponse:
        found = {s.session_id: s for s in SESSIONS}
        return store_pb.BatchGetSessionsResponse(sessions=[
            store_pb.SessionContents(session=found[i], rewards=REWARDS.get(i, [])) for i in request.session_ids])  # fmt: skip

    def get_session(self, request: store_pb.GetSessionRequest) -> store_pb.GetSessionResponse:
        return store_pb.GetSessionResponse(
            session=next(s for s in SESSIONS if s.session_id == request.session_id)
        )

    def list_calls(self, request: store_pb.ListCallsRequest) -> store_pb.ListCallsResponse:
        return store_pb.ListCallsResponse(calls=[call()] if request.session_id == "s" else [])

    def list_rewards(self, request: store_pb.ListRewardsRequest) -> store_pb.ListRewardsResponse:
        return store_pb.ListRewardsResponse(rewards=REWARDS.get(request.session_id, []))


def get(store: FakeStore, path: str) -> str:
    def missing(_: object) -> None:
        raise RPCError(grpc.StatusCode.NOT_FOUND, "no trajectory")

    assembler: Any = SimpleNamespace(get_trajectory=missing)
    client: Any = store
    trainer: Any = SimpleNamespace()
    services = Services(Upstream("store", "-", client), Upstream("assembler", "-", assembler),
                        Upstream("trainer", "-", trainer))  # fmt: skip
    with TestClient(create_app(ConsoleConfig(port=0), services)) as client:
        response = client.get(path)
    assert response.status_code == 200, response.text
    return response.text


def test_the_list_asks_the_store_by_user_and_tags_and_shows_them_as_links() -> None:
    store = FakeStore()
    html = get(store, "/sessions?user=acct-1&tag=prod,%20eu&outcome=succeeded")
    (asked,) = store.asked
    assert asked.end_user_id == "acct-1" and list(asked.tags) == ["eu", "prod"]
    assert 'name="user" value="acct-1"' in html and 'name="tag" value="eu,prod"' in html
    assert "<th>end user</th><th>tags</th>" in html
    row = re.search(r'<a href="/sessions/s">s</a>.*?</tr>', html, re.S)
    assert row is not None
    cells = row.group(0)
    assert 'href="/sessions?outcome=succeeded&amp;user=acct-1&amp;tag=eu%2Cprod"' in cells, (
        "a user link keeps the filters"
    )
    shown = re.findall(r'<a class="tag" href="/sessions\?([^"]*)"[^>]*>([^<]*)</a>', cells)
    assert [tag for _, tag in shown] == ["beta", "checkout", "eu", "prod"][:SHOWN_TAGS]
    assert shown[0][0] == "outcome=succeeded&amp;user=acct-1&amp;tag=beta%2Ceu%2Cprod", (
        "a tag link narrows to it too"
    )
    assert '<span class="muted" title="zz-canary">+1</span>' in cells
    # The live refresh asks for the same filtered list.
    assert 'hx-get="/sessions?outcome=succeeded&amp;user=acct-1&amp;tag=eu%2Cprod"' in html


def test_a_bad_tag_is_a_banner_not_an_error_and_the_store_is_asked_without_it() -> None:
    store = FakeStore()
    html = get(store, f"/sessions?tag={'x' * 65}&user=acct-1")
    assert 'role="alert">tag: tag &#39;xxxxxxxx' in html
    assert list(store.asked[0].tags) == [] and store.asked[0].end_user_id == "acct-1"


def test_a_user_and_tags_a_user_chose_are_text_in_the_list() -> None:
    html = get(FakeStore(), "/sessions")
    assert "<script>" not in html and "<img" not in html and "onerror=alert" in html
    assert (
        "&lt;script&gt;window.__pwned = 1&lt;/script&gt;&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"
        in html
    )


def test_a_session_page_shows_its_user_tags_and_feedback_apart_from_its_reward() -> None:
    html = get(FakeStore(), "/sessions/s")
    assert '<dt>end user</dt><dd><a class="user" href="/sessions?user=acct-1"' in html
    assert '<a class="tag" href="/sessions?tag=zz-canary" title="zz-canary">zz-canary</a>' in html
    rewards, feedback = html.split("<h2>Rewards</h2>")[1].split("<h2>Feedback</h2>")
    assert "function:task.score" in rewards and "thumbs" not in rewards and ">0.75<" in rewards
    rows = re.findall(r"<tr><td class=\"mono\">(.*?)</td><td class=\"n\">(.*?)</td><td class=\"mono\">(.*?)</td>",
                      feedback.split("<tbody>")[1])  # fmt: skip
    assert rows == [
        ("thumbs_up", "1", "session"),
        ("thumbs_down", "-1", '<a href="#t1-call-1">call c0</a>'),
        ("(unnamed)", "0.5", "session"),
    ]
    assert 'id="t1-call-1"' in html, "the feedback links to the call it is about"
    assert "2027-01-15 08:00:00" in feedback
    # The trajectory's reward is summed as the assembler sums it: the run's 0.75 and the two session-level signals.
    assert re.search(r"<dt>reward</dt><dd>2.25</dd>", html)


def test_a_session_without_user_tags_or_feedback_shows_none_of_them() -> None:
    html = get(FakeStore(), "/sessions/bare")
    assert "end user" not in html and 'class="tag"' not in html and "Feedback" not in html


def test_a_user_and_tags_a_user_chose_are_text_on_the_session_page() -> None:
    html = get(FakeStore(), "/sessions/evil")
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html

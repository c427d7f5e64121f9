"""Production traffic, attributed, on every backend: a session's end user and tags come
from its calls, ListSessions filters by them, and DeleteSessions removes an end user's
data whole. A backend that fails any of it is not done."""

from __future__ import annotations

import re

import pytest

from parity.api.common.v1 import llm_call_pb2
from parity.services.runtime.errors import InvalidArgument, NotFound
from parity.services.store.records import SessionQuery
from parity.services.store.token_store import TokenStore
from tests.call_factory import conversation
from tests.integration.store.store_requests import FAILED, one_call, reward, write


def attributed(call: llm_call_pb2.LlmCall, user: str = "", *tags: str) -> llm_call_pb2.LlmCall:
    """The call as ingest sends it for a deployed agent: its end user and sorted tags."""
    call.end_user_id = user
    call.tags.extend(sorted(set(tags)))
    return call


def call(call_id: str, session_id: str, user: str = "", *tags: str, parents: tuple[str, ...] = ()):
    return attributed(one_call(call_id, session_id, parents=parents), user, *tags)


async def attribution(store: TokenStore, session_id: str) -> tuple[str, list[str]]:
    session = await store.get_session(session_id)
    return session.end_user_id, session.tags


async def listed(store: TokenStore, query: SessionQuery, page_size: int = 2) -> list[str]:
    found, token = [], ""
    while True:
        page, token = await store.list_sessions(query, page_size, token)
        found += [s.session_id for s in page]
        if not token:
            return found


async def test_a_session_takes_its_end_user_and_tags_from_its_first_call_that_carries_them(
    store: TokenStore,
) -> None:
    # In one batch: the first call carries nothing, the second sets both, the third is too late.
    await write(store, [
        call("a1", "a"), call("a2", "a", "user-1", "prod"), call("a3", "a", "user-2", "beta"),
        # Each from the first call that carries it: the end user from one call, tags from a later one.
        call("b1", "b", "user-1"), call("b2", "b", "user-2", "prod", "checkout"),
        # "mid" is created as an ancestor, "early" by a close: neither has an end user yet.
        call("k1", "kid", "user-3", parents=("mid",)),
    ])  # fmt: skip
    await store.close_session("early", FAILED, "crashed before its first call")
    assert await attribution(store, "a") == ("user-1", ["prod"])
    assert await attribution(store, "b") == ("user-1", ["checkout", "prod"])
    assert await attribution(store, "mid") == await attribution(store, "early") == ("", [])
    await write(
        store, [call("m1", "mid", "user-3", "prod"), call("e1", "early", "user-4", "beta", "prod")]
    )
    assert await attribution(store, "mid") == ("user-3", ["prod"])
    assert await attribution(store, "early") == ("user-4", ["beta", "prod"])
    # Once set, never rewritten by a later batch.
    await write(store, [call("a4", "a", "user-9", "other"), call("m2", "mid", "user-9", "other")])
    assert await attribution(store, "a") == ("user-1", ["prod"])
    assert await attribution(store, "mid") == ("user-3", ["prod"])
    assert await listed(store, SessionQuery(tags=("other",))) == []
    assert await listed(store, SessionQuery(end_user_id="user-9")) == []
    assert (await store.get_session("a")).call_count == 4


async def test_sessions_are_listed_by_end_user_and_tags_with_other_filters_and_paging(
    store: TokenStore,
) -> None:
    await write(store, [
        call("c0", "s0", "user-1", "checkout", "prod"),
        call("c1", "s1", "user-1", "prod"),
        call("c2", "s2", "user-2", "checkout", "prod"),
        call("c3", "s3", "user-1"),
        call("c4", "s4"),
        call("c5", "s5", "user-1", "checkout", "prod"),
        call("c6", "s6", "user-1", "checkout", "prod", "zeta"),
        call("c7", "t7", "user-1", "checkout"),
    ])  # fmt: skip
    await store.close_session("s5", FAILED, "boom")
    assert await listed(store, SessionQuery(end_user_id="user-1")) == [
        "s0",
        "s1",
        "s3",
        "s5",
        "s6",
        "t7",
    ]
    assert await listed(store, SessionQuery(end_user_id="user-1", newest_first=True), page_size=4) == [
        "t7", "s6", "s5", "s3", "s1", "s0",
    ]  # fmt: skip
    assert await listed(store, SessionQuery(tags=("prod",))) == ["s0", "s1", "s2", "s5", "s6"]
    both = ["s0", "s2", "s5", "s6"]
    assert await listed(store, SessionQuery(tags=("checkout", "prod"))) == both
    # A filter is a set: any order, repeats ignored.
    assert await listed(store, SessionQuery(tags=("prod", "checkout", "prod"))) == both
    assert await listed(store, SessionQuery(tags=("checkout", "prod", "zeta"))) == ["s6"]
    assert await listed(store, SessionQuery(end_user_id="user-1", tags=("checkout", "prod"))) == [
        "s0", "s5", "s6",
    ]  # fmt: skip
    assert await listed(
        store, SessionQuery(end_user_id="user-1", tags=("checkout",), outcome=FAILED)
    ) == ["s5"]
    assert await listed(
        store, SessionQuery(end_user_id="user-1", tags=("checkout",), session_id_prefix="t")
    ) == ["t7"]
    assert await listed(store, SessionQuery(end_user_id="nobody")) == []
    assert await listed(store, SessionQuery(tags=("prod", "unknown"))) == []
    # A page token is bound to its filters.
    _, token = await store.list_sessions(SessionQuery(end_user_id="user-1"), 2, "")
    with pytest.raises(InvalidArgument, match="different query"):
        await store.list_sessions(SessionQuery(end_user_id="user-2"), 2, token)
    _, token = await store.list_sessions(SessionQuery(tags=("prod",)), 2, "")
    with pytest.raises(InvalidArgument, match="different query"):
        await store.list_sessions(SessionQuery(tags=("checkout", "prod")), 2, token)


BAD_FILTERS = {
    "tags[1]: tag 'a,b' must be 1 to 64 characters": SessionQuery(tags=("prod", "a,b")),
    "tags[0]: tag ' padded'": SessionQuery(tags=(" padded",)),
    "tags[0]: tag 'xxx": SessionQuery(tags=("x" * 65,)),
    "tags[0]: tag ''": SessionQuery(tags=("",)),
    "tags holds 33 tags; at most 32": SessionQuery(tags=tuple(f"t{n}" for n in range(33))),
    "end_user_id 'user\\x00' contains a control character": SessionQuery(end_user_id="user\x00"),
    "end_user_id is 257 characters; at most 256": SessionQuery(end_user_id="u" * 257),
}


async def test_bad_filters_are_refused_naming_the_field(store: TokenStore) -> None:
    for message, query in BAD_FILTERS.items():
        with pytest.raises(InvalidArgument, match=re.escape(message)):
            await store.list_sessions(query, 10, "")


async def session_exists(store: TokenStore, session_id: str) -> bool:
    try:
        await store.get_session(session_id)
    except NotFound:
        return False
    return True


async def test_deleting_an_end_user_removes_their_sessions_descendants_calls_and_rewards(
    store: TokenStore,
) -> None:
    doomed = [
        *(attributed(c, "user-1", "prod", "user-1-tag") for c in conversation("u1-a", turns=3)),
        call("b1", "u1-b", "user-1", "prod"),
        # Descendants go with their ancestor, whoever they served.
        call("k1", "u1-b-kid", parents=("u1-b",)),
        call("k2", "u1-b-grandkid", "user-2", "prod", parents=("u1-b", "u1-b-kid")),
    ]
    kept = [
        call("x1", "u2-a", "user-2", "prod"),
        call("x2", "u2-a", "user-2", "prod"),
        call("n1", "anonymous"),
    ]
    await write(store, doomed + kept)
    await store.write_rewards([
        reward("r1", "u1-a", 1.0), reward("r2", "u1-a", 0.5, call_id=doomed[0].call_id, name="thumbs_up"),
        reward("r3", "u1-b-kid", 1.0), reward("r4", "u2-a", 1.0),
    ])  # fmt: skip
    assert await store.delete_sessions([], None, "user-1") == (4, 6, 3)
    for session_id in ("u1-a", "u1-b", "u1-b-kid", "u1-b-grandkid"):
        assert not await session_exists(store, session_id), session_id
    with pytest.raises(NotFound):
        await store.get_call("k2", full=True)
    assert await listed(store, SessionQuery(end_user_id="user-1")) == []
    assert await listed(store, SessionQuery(tags=("user-1-tag",))) == []
    assert await listed(store, SessionQuery(tags=("prod",))) == ["u2-a"]
    assert (await store.get_session("u2-a")).call_count == 2
    assert [r.reward_id for r in (await store.list_rewards("u2-a", 10, ""))[0]] == ["r4"]
    stats = await store.stats()
    assert (stats.session_count, stats.call_count, stats.reward_count) == (2, 3, 1)

    # An end user the store does not know, or no longer knows: nothing to delete.
    assert await store.delete_sessions([], None, "user-1") == (0, 0, 0)
    assert await store.delete_sessions([], None, "never-seen") == (0, 0, 0)
    # The same session id, written again, is a new session: the old tags are gone with the old one.
    await write(store, [call("again", "u1-a", "user-1", "beta")])
    assert await listed(store, SessionQuery(tags=("user-1-tag",))) == []
    assert await listed(store, SessionQuery(tags=("beta",))) == ["u1-a"]
    # With ids in the same request: both go, in one transaction.
    assert await store.delete_sessions(["anonymous"], None, "user-2") == (2, 3, 1)
    assert await listed(store, SessionQuery()) == ["u1-a"]


async def test_deleting_by_end_user_refuses_a_bad_id_naming_the_field(store: TokenStore) -> None:
    await write(store, [call("c", "s", "user-1")])
    with pytest.raises(
        InvalidArgument, match=re.escape("end_user_id 'user-1\\n' contains a control character")
    ):
        await store.delete_sessions([], None, "user-1\n")
    with pytest.raises(InvalidArgument, match="end_user_id"):
        await store.delete_sessions([], None, "")
    assert (await store.get_session("s")).end_user_id == "user-1"

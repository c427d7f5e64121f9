"""Sessions and rewards on every backend: created with their ancestors, listed, closed,
rewarded, counted, deleted and expired. A backend that fails any of it is not done."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from parity.services.runtime.errors import FailedPrecondition, InvalidArgument, NotFound
from parity.services.store import commits, token_store
from parity.services.store.backends import open_backend
from parity.services.store.records import SESSION_STATE_CLOSED, SESSION_STATE_OPEN, SessionQuery
from parity.services.store.token_store import TokenStore
from tests.call_factory import conversation, make_call
from tests.integration.store.store_requests import (
    FAILED,
    SUCCEEDED,
    all_calls,
    one_call,
    reward,
    wire,
    write,
)
from tests.waiting import eventually_async


async def test_sessions_are_created_with_their_ancestors_and_listed(store: TokenStore) -> None:
    await write(
        store,
        [
            make_call("c1", "child", [1], [[2]], parents=("root",), metadata={"task": "t1"}),
            make_call("c2", "grandchild", [1], [[2]], parents=("root", "child")),
            make_call("c3", "other", [1], [[2]]),
        ],
    )
    child = await store.get_session("child")
    assert (child.parent_session_ids, child.metadata, child.call_count) == (
        ["root"],
        {"task": "t1"},
        1,
    )
    assert (await store.get_session("root")).call_count == 0
    children, _ = await store.list_sessions(SessionQuery(parent_session_id="root"), 100, "")
    assert [s.session_id for s in children] == ["child"]
    everything, token = await store.list_sessions(SessionQuery(), 2, "")
    rest, last = await store.list_sessions(SessionQuery(), 2, token)
    assert (
        len(everything) == 2
        and last == ""
        and {s.session_id for s in everything + rest} == {"root", "child", "grandchild", "other"}
    )


async def test_sessions_list_newest_first_filtered_by_outcome_metadata_and_id_prefix(
    store: TokenStore,
) -> None:
    await write(store, [
        one_call(f"c{n}", f"run-a-{n}", metadata={"parity.run_id": "a" if n % 2 else "b", "task": f"t{n % 3}"})
        for n in range(7)
    ])  # fmt: skip
    await store.close_session("run-a-1", FAILED, "boom")
    await store.close_session("run-a-3", SUCCEEDED, "")

    async def ids(query: SessionQuery, page_size: int = 2) -> list[str]:
        found, token = [], ""
        while True:
            page, token = await store.list_sessions(query, page_size, token)
            found += [s.session_id for s in page]
            if not token:
                return found

    assert await ids(SessionQuery(newest_first=True)) == [f"run-a-{n}" for n in range(6, -1, -1)]
    assert await ids(SessionQuery(metadata=(("parity.run_id", "a"),), newest_first=True)) == [
        "run-a-5",
        "run-a-3",
        "run-a-1",
    ]
    assert await ids(SessionQuery(metadata=(("parity.run_id", "a"), ("task", "t0")))) == ["run-a-3"]
    assert await ids(SessionQuery(outcome=FAILED)) == ["run-a-1"]
    assert await ids(SessionQuery(session_id_prefix="run-a-", newest_first=True), page_size=3) == [
        f"run-a-{n}" for n in range(6, -1, -1)
    ]
    assert await ids(SessionQuery(session_id_prefix="run-b")) == []
    # A token is bound to its query: the same position in another query is refused.
    _, token = await store.list_sessions(SessionQuery(newest_first=True), 2, "")
    with pytest.raises(InvalidArgument, match="different query"):
        await store.list_sessions(SessionQuery(), 2, token)
    with pytest.raises(InvalidArgument, match=re.escape("metadata['k']")):
        await store.list_sessions(SessionQuery(metadata=(("k", "\x00"),)), 2, "")


async def test_a_session_created_implicitly_takes_its_parents_and_metadata_later(
    store: TokenStore,
) -> None:
    # "mid" is first created as an ancestor, "early" by a close: neither knows its parents yet.
    await write(store, [one_call("k", "kid", parents=("mid",))])
    await store.close_session("early", FAILED, "crashed before its first call")
    await write(store, [
        one_call("m", "mid", parents=("root",), metadata={"task": "t1"}),
        one_call("e", "early", parents=("root",), metadata={"task": "t2"}),
    ])  # fmt: skip
    for session_id, task in (("mid", "t1"), ("early", "t2")):
        session = await store.get_session(session_id)
        assert (session.parent_session_ids, session.metadata) == (["root"], {"task": task})
        assert session.call_count == 1
    children, _ = await store.list_sessions(SessionQuery(parent_session_id="root"), 100, "")
    assert [s.session_id for s in children] == ["mid", "early"]
    # Only what is still empty is filled: a later call does not rewrite them.
    await write(store, [one_call("m2", "mid", parents=("other",), metadata={"task": "t3"})])
    mid = await store.get_session("mid")
    assert (mid.parent_session_ids, mid.metadata, mid.call_count) == (["root"], {"task": "t1"}, 2)


async def test_close_session_marks_it_complete_once(store: TokenStore) -> None:
    await write(store, [make_call("c", "s", [1], [[2]])])
    closed = await store.close_session("s", FAILED, "agent raised")
    assert (closed.state, closed.outcome, closed.error_message) == (
        SESSION_STATE_CLOSED,
        FAILED,
        "agent raised",
    )
    assert closed.close_time is not None
    assert (await store.close_session("s", FAILED, "again")).error_message == "agent raised"
    with pytest.raises(FailedPrecondition, match="already closed"):
        await store.close_session("s", SUCCEEDED, "")
    open_, _ = await store.list_sessions(SessionQuery(state=SESSION_STATE_OPEN), 100, "")
    closed_, _ = await store.list_sessions(SessionQuery(state=SESSION_STATE_CLOSED), 100, "")
    assert open_ == [] and [s.session_id for s in closed_] == ["s"]
    empty = await store.close_session("never-called", 0, "")
    assert (empty.state, empty.outcome, empty.call_count) == (SESSION_STATE_CLOSED, SUCCEEDED, 0)


async def test_rewards_attach_to_trajectories_and_steps(store: TokenStore) -> None:
    await write(store, [make_call("c", "s", [1], [[2]]), make_call("x", "other", [1], [[2]])])
    result = await store.write_rewards(
        [
            reward("r1", "s", 1.0),
            reward("r2", "s", 0.5, call_id="c"),
            reward("r3", "s", 0.25, step_index=0),
        ]
    )
    assert (result.written, result.duplicates) == (3, 0)
    retry = await store.write_rewards([reward("r1", "s", 1.0)])
    assert (retry.written, retry.duplicates) == (0, 1)
    listed, _ = await store.list_rewards("s", 100, "")
    assert [(r.reward_id, r.value, r.WhichOneof("step")) for r in listed] == [
        ("r1", 1.0, None),
        ("r2", 0.5, "call_id"),
        ("r3", 0.25, "step_index"),
    ]
    assert all(r.HasField("create_time") for r in listed)
    with pytest.raises(NotFound, match="unknown session"):
        await store.write_rewards([reward("r4", "nope", 1.0)])
    with pytest.raises(NotFound, match="unknown call"):
        await store.write_rewards([reward("r5", "s", 1.0, call_id="nope")])
    with pytest.raises(InvalidArgument, match="belongs to session 'other'"):
        await store.write_rewards([reward("r6", "s", 1.0, call_id="x")])
    assert [r.reward_id for r in (await store.list_rewards("s", 100, ""))[0]] == ["r1", "r2", "r3"]


async def test_delete_sessions_removes_descendants_calls_and_rewards(store: TokenStore) -> None:
    await write(
        store,
        [
            *conversation("root", turns=3),
            make_call("k", "kid", [1], [[2]], parents=("root",)),
            make_call("keep", "keep", [1], [[2]]),
        ],
    )
    await store.write_rewards([reward("r", "root", 1.0)])
    assert await store.delete_sessions(["root"], None) == (2, 4, 1)
    for session_id in ("root", "kid"):
        with pytest.raises(NotFound):
            await store.get_session(session_id)
    with pytest.raises(NotFound):
        await store.get_call("k", full=True)
    assert (await store.get_session("keep")).call_count == 1
    again = conversation("root", turns=2, seed=7, prefix="new-")
    await write(store, again)
    assert wire(await all_calls(store, "root")) == wire(again)


async def test_retention_deletes_sessions_not_updated_since(store: TokenStore) -> None:
    await write(store, [make_call("old", "old", [1], [[2]])])
    cutoff = (await store.get_session("old")).update_time + 1e-3
    await asyncio.sleep(0.01)
    await write(store, [make_call("new", "new", [1], [[2]])])
    assert await store.delete_sessions([], cutoff) == (1, 1, 0)
    assert (await store.get_session("new")).call_count == 1


async def test_store_stats_count_what_is_stored(store: TokenStore) -> None:
    await write(store, conversation("s", turns=3, prompt_len=10, completion_len=5, user_len=2))
    stats = await store.stats()
    assert (stats.session_count, stats.call_count) == (1, 3)
    assert stats.logical_token_count == (10 + 5) + (17 + 5) + (24 + 5)


async def session_exists(store: TokenStore, session_id: str) -> bool:
    try:
        await store.get_session(session_id)
    except NotFound:
        return False
    return True


class StoreClock:
    """The store's wall clock, set by the test: what a session's update time and retention's cutoff read. Its
    monotonic clock and the retention loop's sleeps stay real."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def __getattr__(self, name: str):  # noqa: ANN204 - whatever else the store reads of the time module
        return getattr(time, name)


def recording_retention_passes(
    store: TokenStore, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[float, int]]:
    """Each retention pass the store makes once it is started, as (its cutoff, sessions it deleted)."""
    passes: list[tuple[float, int]] = []
    delete_sessions = store.delete_sessions

    async def recorded(session_ids, updated_before, end_user_id=""):  # noqa: ANN001, ANN202
        deleted = await delete_sessions(session_ids, updated_before, end_user_id)
        passes.append((updated_before, deleted.sessions))
        return deleted

    monkeypatch.setattr(store, "delete_sessions", recorded)
    return passes


async def test_the_retention_setting_deletes_idle_sessions_in_the_background(
    backend_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = 1_000_000.0
    clock = StoreClock(start)
    monkeypatch.setattr(commits, "time", clock)
    monkeypatch.setattr(token_store, "time", clock)
    store = TokenStore(open_backend(backend_url), retention_s=2.0)
    passes = recording_retention_passes(store, monkeypatch)
    await store.start()
    try:
        await write(
            store, [make_call("old", "old", [1], [[2]]), make_call("new-0", "new", [1], [[2]])]
        )
        # "new" stays active: a second call 1.5 s later; "old" stays idle since its one call.
        clock.now = start + 1.5
        await write(store, [make_call("new-1", "new", [1], [[2]])])

        def a_pass_at(now: float) -> tuple[float, int] | None:
            """The first retention pass that read the clock once it said `now`: (its cutoff, what it deleted)."""
            assert store.retention_s is not None  # set above
            return next((p for p in passes if p[0] >= now - store.retention_s), None)

        # Idle for exactly the retention period: not yet past it.
        clock.now = start + 2.0
        _, deleted = await eventually_async(lambda: a_pass_at(start + 2.0), what="a retention pass")
        assert deleted == 0 and await session_exists(store, "old"), (
            "deleted before it was idle past the period"
        )
        clock.now = start + 3.0
        _, deleted = await eventually_async(lambda: a_pass_at(start + 3.0), what="a retention pass")
        assert deleted == 1 and not await session_exists(store, "old")
        assert (await store.get_session("new")).call_count == 2, (
            "a session active within the period stays"
        )
    finally:
        await store.stop()


# The loop under test is the store's; any one backend shows it.
@pytest.mark.parametrize("backend_url", ["memory"], indirect=True)
async def test_retention_goes_on_after_a_failed_pass(backend_url: str, monkeypatch) -> None:
    store = TokenStore(open_backend(backend_url), retention_s=0.5)
    delete_sessions = store.backend.delete_sessions
    passes = 0

    def fails_first(session_ids, updated_before, end_user_id):
        nonlocal passes
        passes += 1
        if passes == 1:
            raise RuntimeError("database is locked")
        return delete_sessions(session_ids, updated_before, end_user_id)

    monkeypatch.setattr(store.backend, "delete_sessions", fails_first)
    await store.start()
    try:
        await write(store, [make_call("old", "old", [1], [[2]])])

        async def deleted() -> bool:
            return (await store.stats()).session_count == 0

        await eventually_async(
            deleted, what="a retention pass after the failed one deleting the idle session"
        )
        assert passes > 1
    finally:
        await store.stop()

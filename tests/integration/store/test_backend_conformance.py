"""The behaviour every store backend must have. A backend that fails any of it is not done."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import re
import threading
import time

import psycopg
import pytest

from parity.api.common.v1 import llm_call_pb2, reward_pb2
from parity.services.runtime.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from parity.services.store.backends import open_backend
from parity.services.store.backends.postgres import WRITER_APPLICATION_NAME
from parity.services.store.records import (
    SESSION_STATE_CLOSED,
    SESSION_STATE_OPEN,
    MetadataUpdate,
    SessionQuery,
)
from parity.services.store.token_store import TokenStore
from tests.call_factory import conversation, make_call

SUCCEEDED, FAILED = 1, 2


async def write(store: TokenStore, calls):
    """write_calls takes ownership of its messages; tests keep theirs to compare against."""
    return await store.write_calls([llm_call_pb2.LlmCall.FromString(c.SerializeToString()) for c in calls])


def wire(calls) -> list[bytes]:
    return [c.SerializeToString(deterministic=True) for c in calls]


async def all_calls(store: TokenStore, session_id: str, page_size: int = 7) -> list:
    calls, token = [], ""
    while True:
        page, token = await store.list_calls(session_id, page_size, token, full=True)
        calls += page
        if not token:
            return calls


async def test_calls_read_back_exactly_as_written(store: TokenStore) -> None:
    single = make_call("single", "s-single", [1, 2, 3], [[4, 5], [6]])
    multi = conversation("s-multi", turns=6)
    no_logprobs = make_call("no-logprobs", "s-single", [9], [[10]])
    no_logprobs.choices[0].ClearField("logprobs")
    await write(store, [single, *multi, no_logprobs])
    assert wire([await store.get_call("single", full=True)]) == wire([single])
    assert wire(await all_calls(store, "s-multi")) == wire(multi)
    assert wire([await store.get_call("no-logprobs", full=True)]) == wire([no_logprobs])


async def test_multi_turn_prompts_are_stored_as_references(store: TokenStore) -> None:
    calls = conversation("s", turns=5)
    await write(store, calls)
    rows = store.backend.get_call_rows([c.call_id for c in calls])
    assert rows[calls[0].call_id].ref_call_id is None
    for previous, call in zip(calls, calls[1:], strict=False):
        row = rows[call.call_id]
        assert (row.ref_call_id, row.ref_choice) == (previous.call_id, 0)
        assert len(row.prompt.middle) == 30 * 4, "only the new user turn is stored"
    assert wire([await store.get_call(calls[-1].call_id, full=True)]) == wire(calls[-1:])


async def test_a_prompt_that_continues_another_choice_references_that_choice(store: TokenStore) -> None:
    first = make_call("a", "s", list(range(40)), [[100] * 20, [200] * 20])
    second = make_call("b", "s", list(range(40)) + [200] * 20 + [7, 8], [[9]])
    await write(store, [first])
    await write(store, [second])
    assert store.backend.get_call_rows(["b"])["b"].ref_choice == 1
    assert wire([await store.get_call("b", full=True)]) == wire([second])


async def test_an_edited_history_still_reads_back_exactly(store: TokenStore) -> None:
    calls = conversation("s", turns=3)
    edited = make_call("edited", "s", list(range(500)), [[1, 2]])
    await write(store, [*calls, edited])
    assert wire(await all_calls(store, "s")) == wire([*calls, edited])


async def test_retried_batches_write_nothing_twice(store: TokenStore) -> None:
    calls = conversation("s", turns=4)
    first = await write(store, calls[:3])
    retry = await write(store, calls)
    assert (first.written, first.duplicates, retry.written, retry.duplicates) == (3, 0, 1, 3)
    assert (await store.get_session("s")).call_count == 4
    assert len(await all_calls(store, "s")) == 4
    again = await write(store, [calls[0], calls[0]])
    assert (again.written, again.duplicates) == (0, 2)


async def test_concurrent_writers_all_land_in_one_commit_order(store: TokenStore) -> None:
    batches = [conversation(f"s{w}", turns=10, prompt_len=20, completion_len=5) for w in range(16)]
    results = await asyncio.gather(*(write(store, batch) for batch in batches))
    assert sum(r.written for r in results) == 160
    seqs = [row.seq for row in store.backend.call_rows_after(0, 1000)]
    assert len(seqs) == 160 and seqs == sorted(set(seqs))
    for w, batch in enumerate(batches):
        assert wire(await all_calls(store, f"s{w}")) == wire(batch)


async def test_a_call_without_a_session_is_refused(store: TokenStore) -> None:
    with pytest.raises(InvalidArgument, match=re.escape("calls[0].session_id is required")):
        await write(store, [make_call("orphan", "", [1], [[2]])])
    assert (await store.stats()).call_count == 0


async def test_basic_view_leaves_out_token_arrays(store: TokenStore) -> None:
    await write(store, [make_call("c", "s", [1, 2], [[3]])])
    basic = await store.get_call("c", full=False)
    assert basic.prompt_token_ids == b"" and basic.request_json == b"" and basic.choices[0].token_ids == b""
    assert basic.choices[0].text == "3" and basic.model == "tiny"


async def test_list_calls_pages_in_a_stable_order(store: TokenStore) -> None:
    calls = conversation("s", turns=9, prompt_len=10, completion_len=3)
    await write(store, calls)
    page, token = await store.list_calls("s", 4, "", full=False)
    assert [c.call_id for c in page] == [c.call_id for c in calls[:4]] and token
    await write(store, [make_call("late", "s", [1], [[1]])])
    rest, token2 = await store.list_calls("s", 100, token, full=False)
    assert [c.call_id for c in rest] == [c.call_id for c in calls[4:]] + ["late"] and token2 == ""


async def test_bad_lookups_are_not_found_or_invalid(store: TokenStore) -> None:
    await write(store, [make_call("c", "s", [1], [[2]])])
    with pytest.raises(NotFound, match="call 'nope' does not exist"):
        await store.get_call("nope", full=True)
    with pytest.raises(NotFound, match="session 'nope' does not exist"):
        await store.list_calls("nope", 10, "", full=False)
    _, token = await store.list_calls("s", 1, "", full=False)
    with pytest.raises(InvalidArgument, match="page_token"):
        await store.list_calls("s", 1, "garbage!", full=False)
    with pytest.raises(InvalidArgument, match="page_size must not be negative"):
        await store.list_calls("s", -1, "", full=False)


def one_call(call_id: str = "c1", session_id: str = "s1", **fields) -> llm_call_pb2.LlmCall:
    return make_call(call_id, session_id, [1], [[2]], **fields)


async def test_control_characters_in_ids_are_refused_naming_the_field(store: TokenStore) -> None:
    await write(store, [one_call("c", "s")])
    control = "contains the control character"
    refused_calls = {
        f"calls[0].call_id {control} U+0000": one_call("c\x00"),
        # U+001F separates page-token fields: such a session could never be paged through.
        f"calls[0].session_id {control} U+001F": one_call(session_id="a\x1fb"),
        f"calls[0].parent_session_ids[1] {control} U+007F": one_call(parents=("root", "mid\x7f")),
        f"calls[0].trajectory_name {control} U+000A": one_call(trajectory="t\n"),
        f"calls[0].metadata key 'k\\x00' {control} U+0000": one_call(metadata={"k\x00": "v"}),
        "calls[0].metadata['k'] contains NUL": one_call(metadata={"k": "v\x00"}),
    }
    for message, call in refused_calls.items():
        with pytest.raises(InvalidArgument, match=re.escape(message)):
            await write(store, [call])
    refusals = {
        "rewards[0].reward_id": lambda: store.write_rewards([reward("r\x00", "s", 1.0)]),
        "rewards[0].session_id": lambda: store.write_rewards([reward("r", "s\x01", 1.0)]),
        "rewards[0].call_id": lambda: store.write_rewards([reward("r", "s", 1.0, call_id="\x00")]),
        "session_id": lambda: store.close_session("s\x00", SUCCEEDED, ""),
        "error_message": lambda: store.close_session("s", FAILED, "boom\x00"),
        "updates[0].metadata['k']": lambda: store.update_session_metadata(
            [MetadataUpdate("s", {"k": "\x00"}, [])]
        ),
        "updates[0].remove_keys[0]": lambda: store.update_session_metadata(
            [MetadataUpdate("s", {}, ["a\tb"])]
        ),
        "session_ids[0]": lambda: store.delete_sessions(["s\x00"], None),
        "parent_session_id": lambda: store.list_sessions(SessionQuery(parent_session_id="p\x00"), 10, ""),
    }
    for field, refusal in refusals.items():
        with pytest.raises(InvalidArgument, match=re.escape(field)):
            await refusal()
    # Refused alone, never failing the transaction it would have shared.
    good, bad = await asyncio.gather(
        write(store, [one_call("ok", "s2", metadata={"note": "line\nbreak\ttab"})]),
        write(store, [one_call("bad", "s3", metadata={"k": "\x00"})]),
        return_exceptions=True,
    )
    assert isinstance(bad, InvalidArgument) and good.written == 1
    assert (await store.get_session("s2")).metadata == {"note": "line\nbreak\ttab"}
    assert (await store.stats()).session_count == 2


async def test_ancestors_and_trajectory_names_are_held_to_the_id_rules(store: TokenStore) -> None:
    too_long = "x" * 257
    refused = {
        "calls[0].parent_session_ids[0] is required": one_call(parents=("",)),
        "calls[0].parent_session_ids[1] is 257 characters": one_call(parents=("r", too_long)),
        "calls[0].trajectory_name is 257 characters": one_call(trajectory=too_long),
    }
    for message, call in refused.items():
        with pytest.raises(InvalidArgument, match=re.escape(message)):
            await write(store, [call])
    assert (await store.stats()).session_count == 0


async def test_watch_streams_everything_after_a_cursor_then_tails(store: TokenStore) -> None:
    first = conversation("a", turns=5, prompt_len=10, completion_len=3)
    await write(store, first)
    stream = store.watch_calls("", full=True, max_batch_size=2)
    seen, cursor = [], ""
    while len(seen) < 5:
        calls, cursor = await anext(stream)
        seen += calls
    assert wire(seen) == wire(first)
    live = conversation("b", turns=2, prompt_len=10, completion_len=3)
    await write(store, live)
    calls, live_cursor = await asyncio.wait_for(anext(stream), 5)
    assert wire(calls) == wire(live)
    await stream.aclose()

    resumed = store.watch_calls(cursor, full=True, max_batch_size=100)
    calls, resumed_cursor = await asyncio.wait_for(anext(resumed), 5)
    assert wire(calls) == wire(live) and resumed_cursor == live_cursor
    heartbeat, heartbeat_cursor = await asyncio.wait_for(anext(resumed), 5)
    assert heartbeat == [] and heartbeat_cursor == live_cursor
    await resumed.aclose()


async def test_watch_refuses_bad_cursors(store: TokenStore) -> None:
    with pytest.raises(InvalidArgument, match="malformed"):
        await anext(store.watch_calls("not a cursor", full=False, max_batch_size=10))


async def test_sessions_are_created_with_their_ancestors_and_listed(store: TokenStore) -> None:
    await write(store, [
        make_call("c1", "child", [1], [[2]], parents=("root",), metadata={"task": "t1"}),
        make_call("c2", "grandchild", [1], [[2]], parents=("root", "child")),
        make_call("c3", "other", [1], [[2]]),
    ])
    child = await store.get_session("child")
    assert (child.parent_session_ids, child.metadata, child.call_count) == (["root"], {"task": "t1"}, 1)
    assert (await store.get_session("root")).call_count == 0
    children, _ = await store.list_sessions(SessionQuery(parent_session_id="root"), 100, "")
    assert [s.session_id for s in children] == ["child"]
    everything, token = await store.list_sessions(SessionQuery(), 2, "")
    rest, last = await store.list_sessions(SessionQuery(), 2, token)
    assert len(everything) == 2 and last == "" and {s.session_id for s in everything + rest} == {
        "root", "child", "grandchild", "other"}


async def test_sessions_list_newest_first_filtered_by_outcome_metadata_and_id_prefix(store: TokenStore) -> None:
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
    assert await ids(SessionQuery(metadata=(("parity.run_id", "a"),), newest_first=True)) == ["run-a-5", "run-a-3", "run-a-1"]
    assert await ids(SessionQuery(metadata=(("parity.run_id", "a"), ("task", "t0")))) == ["run-a-3"]
    assert await ids(SessionQuery(outcome=FAILED)) == ["run-a-1"]
    assert await ids(SessionQuery(session_id_prefix="run-a-", newest_first=True), page_size=3) == [
        f"run-a-{n}" for n in range(6, -1, -1)]
    assert await ids(SessionQuery(session_id_prefix="run-b")) == []
    # A token is bound to its query: the same position in another query is refused.
    _, token = await store.list_sessions(SessionQuery(newest_first=True), 2, "")
    with pytest.raises(InvalidArgument, match="different query"):
        await store.list_sessions(SessionQuery(), 2, token)
    with pytest.raises(InvalidArgument, match=re.escape("metadata['k']")):
        await store.list_sessions(SessionQuery(metadata=(("k", "\x00"),)), 2, "")


async def test_a_watch_from_latest_sends_only_calls_committed_after_it_opened(store: TokenStore) -> None:
    await write(store, conversation("old", turns=3, prompt_len=10, completion_len=3))
    stream = store.watch_calls("", full=False, max_batch_size=100, from_latest=True)
    first = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.3)
    new = conversation("new", turns=2, prompt_len=10, completion_len=3)
    await write(store, new)
    calls, _ = await asyncio.wait_for(first, 5)
    while not calls:
        calls, _ = await asyncio.wait_for(anext(stream), 5)
    assert [c.call_id for c in calls] == [c.call_id for c in new]
    await stream.aclose()


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
    assert (closed.state, closed.outcome, closed.error_message) == (SESSION_STATE_CLOSED, FAILED, "agent raised")
    assert closed.close_time is not None
    assert (await store.close_session("s", FAILED, "again")).error_message == "agent raised"
    with pytest.raises(FailedPrecondition, match="already closed"):
        await store.close_session("s", SUCCEEDED, "")
    open_, _ = await store.list_sessions(SessionQuery(state=SESSION_STATE_OPEN), 100, "")
    closed_, _ = await store.list_sessions(SessionQuery(state=SESSION_STATE_CLOSED), 100, "")
    assert open_ == [] and [s.session_id for s in closed_] == ["s"]
    empty = await store.close_session("never-called", 0, "")
    assert (empty.state, empty.outcome, empty.call_count) == (SESSION_STATE_CLOSED, SUCCEEDED, 0)


def reward(reward_id: str, session_id: str, value: float, **step) -> reward_pb2.Reward:
    level = reward_pb2.REWARD_LEVEL_STEP if step else reward_pb2.REWARD_LEVEL_TRAJECTORY
    return reward_pb2.Reward(reward_id=reward_id, session_id=session_id, level=level, value=value, **step)


async def test_rewards_attach_to_trajectories_and_steps(store: TokenStore) -> None:
    await write(store, [make_call("c", "s", [1], [[2]]), make_call("x", "other", [1], [[2]])])
    result = await store.write_rewards([
        reward("r1", "s", 1.0), reward("r2", "s", 0.5, call_id="c"), reward("r3", "s", 0.25, step_index=0)])
    assert (result.written, result.duplicates) == (3, 0)
    retry = await store.write_rewards([reward("r1", "s", 1.0)])
    assert (retry.written, retry.duplicates) == (0, 1)
    listed, _ = await store.list_rewards("s", 100, "")
    assert [(r.reward_id, r.value, r.WhichOneof("step")) for r in listed] == [
        ("r1", 1.0, None), ("r2", 0.5, "call_id"), ("r3", 0.25, "step_index")]
    assert all(r.HasField("create_time") for r in listed)
    with pytest.raises(NotFound, match="unknown session"):
        await store.write_rewards([reward("r4", "nope", 1.0)])
    with pytest.raises(NotFound, match="unknown call"):
        await store.write_rewards([reward("r5", "s", 1.0, call_id="nope")])
    with pytest.raises(InvalidArgument, match="belongs to session 'other'"):
        await store.write_rewards([reward("r6", "s", 1.0, call_id="x")])
    assert [r.reward_id for r in (await store.list_rewards("s", 100, ""))[0]] == ["r1", "r2", "r3"]


async def test_delete_sessions_removes_descendants_calls_and_rewards(store: TokenStore) -> None:
    await write(store, [
        *conversation("root", turns=3), make_call("k", "kid", [1], [[2]], parents=("root",)),
        make_call("keep", "keep", [1], [[2]])])
    await store.write_rewards([reward("r", "root", 1.0)])
    sessions, calls = await store.delete_sessions(["root"], None)
    assert (sessions, calls) == (2, 4)
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
    assert await store.delete_sessions([], cutoff) == (1, 1)
    assert (await store.get_session("new")).call_count == 1


async def test_store_stats_count_what_is_stored(store: TokenStore) -> None:
    await write(store, conversation("s", turns=3, prompt_len=10, completion_len=5, user_len=2))
    stats = await store.stats()
    assert (stats.session_count, stats.call_count) == (1, 3)
    assert stats.logical_token_count == (10 + 5) + (17 + 5) + (24 + 5)



@dataclasses.dataclass
class HeldCommits:
    committing: threading.Event = dataclasses.field(default_factory=threading.Event)
    release: threading.Event = dataclasses.field(default_factory=threading.Event)
    count: int = 0


def hold_commits(store: TokenStore, monkeypatch) -> HeldCommits:
    """Make every commit of calls signal `committing`, then wait for `release`."""
    held, commit_calls = HeldCommits(), store.backend.commit_calls

    def held_commit(batch) -> None:
        held.count += 1
        held.committing.set()
        held.release.wait(10)
        commit_calls(batch)

    monkeypatch.setattr(store.backend, "commit_calls", held_commit)
    return held


async def test_writes_queued_behind_a_commit_share_the_next_one(store: TokenStore, monkeypatch) -> None:
    held = hold_commits(store, monkeypatch)
    first = asyncio.create_task(write(store, [make_call("first", "s", [0], [[0]])]))
    assert await asyncio.to_thread(held.committing.wait, 5)
    # Each writer repeats the previous one's last call: within one transaction, the
    # request queued first writes it and the other counts it a duplicate.
    batches = [[make_call(f"c{w}", "s", [w], [[w]]), make_call(f"c{w + 1}", "s", [w + 1], [[w + 1]])]
               for w in range(16)]  # fmt: skip
    writers = [asyncio.create_task(write(store, batch)) for batch in batches]
    await asyncio.sleep(0)  # each writer runs up to queueing its request
    held.release.set()
    results = await asyncio.gather(first, *writers)
    assert held.count == 2
    assert [(r.written, r.duplicates) for r in results] == [(1, 0), (2, 0)] + [(1, 1)] * 15
    expected = [make_call("first", "s", [0], [[0]])] + [batch[0] for batch in batches] + [batches[-1][1]]
    assert wire(await all_calls(store, "s", page_size=100)) == wire(expected)


async def test_a_full_read_racing_a_delete_sees_the_calls_as_they_were(store: TokenStore, monkeypatch) -> None:
    loop = asyncio.get_running_loop()
    memory = store.backend.name == "memory"
    deletes: list[tuple[concurrent.futures.Future, bool]] = []

    def delete_after(name: str) -> None:
        """The next call of backend method `name` (a read's rows) is followed by a
        DeleteSessions of the read's session, before the read goes on to fetch the
        reference rows its calls splice against (or the session's rewards)."""
        read_rows = getattr(store.backend, name)

        def read_then_delete(*args):
            rows = read_rows(*args)
            monkeypatch.setattr(store.backend, name, read_rows)
            deleted = asyncio.run_coroutine_threadsafe(store.delete_sessions(["s"], None), loop)
            # The memory backend's snapshot holds the delete off until the read ends.
            with contextlib.suppress(TimeoutError):
                deleted.result(timeout=0.2 if memory else 10)
            deletes.append((deleted, deleted.done()))
            return rows

        monkeypatch.setattr(store.backend, name, read_then_delete)

    # Each read starts past the session's first calls, so it needs reference rows it
    # did not list, and returns calls[2:] but for GetCall.
    async def list_second_page() -> list:
        _, token = await store.list_calls("s", 2, "", full=False)
        delete_after("list_call_rows")
        return (await store.list_calls("s", 100, token, full=True))[0]

    async def get_last() -> list:
        delete_after("get_call_rows")
        return [await store.get_call("s-t3", full=True)]

    async def watch_past_two() -> list:
        stream = store.watch_calls("", full=False, max_batch_size=2)
        _, cursor = await anext(stream)
        await stream.aclose()
        delete_after("call_rows_after")
        stream = store.watch_calls(cursor, full=True, max_batch_size=100)
        calls, _ = await anext(stream)
        await stream.aclose()
        return calls

    async def batch_get() -> list:
        delete_after("session_call_rows")
        (contents,), _ = await store.batch_get_sessions(["s"], "full")
        assert [r.reward_id for r in contents.rewards] == ["r"]
        return contents.calls[2:]

    # Listing first: a read must not leave the deleted calls in the cache, where GetCall
    # of a new call written under the same id as one of them would splice against it.
    for seed, read in enumerate([list_second_page, get_last, watch_past_two, batch_get]):
        calls = conversation("s", turns=4, prompt_len=30, completion_len=10, user_len=5, seed=seed)
        await write(store, calls)
        await store.write_rewards([reward("r", "s", 1.0)])
        assert wire(await read()) == wire(calls[3:] if read is get_last else calls[2:]), read.__name__
        ((deleted, committed_mid_read),) = deletes
        assert committed_mid_read == (not memory), read.__name__
        assert await asyncio.wrap_future(deleted) == (1, 4)
        deletes.clear()

@pytest.mark.parametrize("backend_url", ["sqlite", "postgresql"], indirect=True)
async def test_a_reopened_store_keeps_data_dedup_and_cursors(open_store) -> None:
    calls = conversation("s", turns=6)
    first = open_store()
    await first.start()
    await write(first, calls[:3])
    _, cursor = await anext(first.watch_calls("", full=False, max_batch_size=100))
    await first.stop()

    second = open_store()
    await second.start()
    await write(second, calls[3:])
    assert second.backend.get_call_rows([calls[3].call_id])[calls[3].call_id].ref_call_id == calls[2].call_id
    resumed, _ = await anext(second.watch_calls(cursor, full=True, max_batch_size=100))
    assert wire(resumed) == wire(calls[3:])
    assert wire(await all_calls(second, "s")) == wire(calls)
    await second.stop()


@pytest.mark.parametrize("backend_url", ["postgresql"], indirect=True)
async def test_the_postgresql_writer_reconnects_after_losing_its_connection(
    store: TokenStore, backend_url: str
) -> None:
    await write(store, [make_call("before", "s", [1], [[2]])])
    # What a database restart does to the writer's session, without restarting the cluster.
    with psycopg.connect(backend_url, autocommit=True) as admin:
        (pid,) = admin.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            (WRITER_APPLICATION_NAME,),
        ).fetchone()
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            await asyncio.sleep(0.01)
    with pytest.raises(Unavailable, match="lost the connection to PostgreSQL"):
        await asyncio.wait_for(write(store, [make_call("lost", "s", [1], [[2]])]), 10)
    after = await asyncio.wait_for(write(store, [make_call("after", "s", [1], [[2]])]), 10)
    assert after.written == 1
    assert [c.call_id for c in await all_calls(store, "s")] == ["before", "after"]


async def session_exists(store: TokenStore, session_id: str) -> bool:
    try:
        await store.get_session(session_id)
    except NotFound:
        return False
    return True


async def test_the_retention_setting_deletes_idle_sessions_in_the_background(backend_url: str) -> None:
    store = TokenStore(open_backend(backend_url), retention_s=2.0)
    await store.start()
    try:
        await write(store, [make_call("old", "old", [1], [[2]]), make_call("new-0", "new", [1], [[2]])])
        # "new" stays active, a call every 0.1 s, until retention has deleted "old", idle since its one call.
        written, written_at = 1, time.monotonic()
        while await session_exists(store, "old"):
            assert written < 300, "the idle session was never deleted"
            await asyncio.sleep(0.1)
            await write(store, [make_call(f"new-{written}", "new", [1], [[2]])])
            written += 1
        assert time.monotonic() - written_at > 1.5, "deleted before it had been idle for the retention period"
        assert (await store.get_session("new")).call_count == written
    finally:
        await store.stop()


async def test_a_write_cancelled_mid_commit_leaves_the_writer_running(
    open_store, monkeypatch
) -> None:
    store = open_store()
    await store.start()
    held = hold_commits(store, monkeypatch)
    # As a client deadline or a server shutdown cancels the RPC's task.
    cancelled = asyncio.create_task(write(store, [make_call("gone", "s", [1], [[2]])]))
    assert await asyncio.to_thread(held.committing.wait, 5)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    held.release.set()
    later = await asyncio.wait_for(write(store, [make_call("later", "s", [1], [[2]])]), 5)
    assert (later.written, (await store.get_session("s")).call_count) == (1, 2)
    await asyncio.wait_for(store.stop(), 5)


# The loop under test is the store's; any one backend shows it.
@pytest.mark.parametrize("backend_url", ["memory"], indirect=True)
async def test_retention_goes_on_after_a_failed_pass(backend_url: str, monkeypatch) -> None:
    store = TokenStore(open_backend(backend_url), retention_s=0.5)
    delete_sessions = store.backend.delete_sessions
    passes = 0

    def fails_first(session_ids, updated_before):
        nonlocal passes
        passes += 1
        if passes == 1:
            raise RuntimeError("database is locked")
        return delete_sessions(session_ids, updated_before)

    monkeypatch.setattr(store.backend, "delete_sessions", fails_first)
    await store.start()
    try:
        await write(store, [make_call("old", "old", [1], [[2]])])
        for _ in range(100):
            await asyncio.sleep(0.05)
            if (await store.stats()).session_count == 0:
                break
        assert passes > 1 and (await store.stats()).session_count == 0
    finally:
        await store.stop()

"""What readers that assemble sessions rely on, on every backend: close metadata, the
watch of closes, bulk reads and metadata updates. A backend that fails any of it is not done."""

from __future__ import annotations

import asyncio

import pytest

from parity.api.common.v1 import reward_pb2
from parity.core import splice_delta
from parity.core.splice_delta import Splice
from parity.services.runtime.errors import FailedPrecondition, InvalidArgument, NotFound
from parity.services.store.commits import WriteResult
from parity.services.store.records import MetadataUpdate, SessionRow
from parity.services.store.token_store import TokenStore
from tests.call_factory import conversation, make_call
from tests.integration.store.store_requests import FAILED, SUCCEEDED, reward, wire, write


async def closes(
    store: TokenStore, cursor: str = "", max_batch_size: int = 100
) -> tuple[list, str]:
    """Every close after the cursor, read until the first heartbeat."""
    seen: list[SessionRow] = []
    stream = store.watch_closed_sessions(cursor, max_batch_size)
    try:
        while True:
            rows, cursor = await asyncio.wait_for(anext(stream), 5)
            if not rows:
                return seen, cursor
            seen += rows
    finally:
        await stream.aclose()


async def test_close_merges_metadata_on_first_close_and_on_repeats(store: TokenStore) -> None:
    await write(store, [make_call("c", "s", [1], [[2]], metadata={"task": "t1", "group": "old"})])
    closed = await store.close_session("s", SUCCEEDED, "", {"group": "g1", "episode": "e1"})
    assert closed.metadata == {"task": "t1", "group": "g1", "episode": "e1"}
    again = await store.close_session("s", SUCCEEDED, "", {"episode": "e2"})
    assert again.metadata == {"task": "t1", "group": "g1", "episode": "e2"}
    assert again.close_seq == closed.close_seq and again.close_time == closed.close_time
    with pytest.raises(FailedPrecondition, match="already closed"):
        await store.close_session("s", FAILED, "", {"episode": "e3"})
    assert (await store.get_session("s")).metadata["episode"] == "e2"
    with pytest.raises(InvalidArgument, match="empty key"):
        await store.close_session("s", SUCCEEDED, "", {"": "x"})


async def test_the_watch_of_closes_follows_close_order_not_creation_order(
    store: TokenStore,
) -> None:
    await write(store, [make_call(f"c{i}", f"s{i}", [1], [[2]]) for i in range(4)])
    for session_id in ("s2", "s0", "never-called", "s3"):
        await store.close_session(session_id, SUCCEEDED, "")
    seen, cursor = await closes(store, max_batch_size=2)
    assert [s.session_id for s in seen] == ["s2", "s0", "never-called", "s3"]
    assert [s.close_seq for s in seen] == sorted({s.close_seq for s in seen})

    await store.close_session("s1", FAILED, "boom", {"group": "g"})
    await store.close_session("s2", SUCCEEDED, "", {"late": "metadata"})
    resumed, _ = await closes(store, cursor)
    assert [(s.session_id, s.outcome, s.metadata) for s in resumed] == [
        ("s1", FAILED, {"group": "g"})
    ]


async def test_close_numbers_are_never_reused_after_a_delete(store: TokenStore) -> None:
    for session_id in ("a", "b"):
        await store.close_session(session_id, SUCCEEDED, "")
    seen, cursor = await closes(store)
    await store.delete_sessions(["b"], None)
    await store.close_session("c", SUCCEEDED, "")
    after, _ = await closes(store, cursor)
    assert [s.session_id for s in after] == ["c"] and after[0].close_seq > seen[-1].close_seq


async def test_the_watch_of_closes_tails_and_refuses_call_cursors(store: TokenStore) -> None:
    stream = store.watch_closed_sessions("", 100)

    async def first_close() -> list:
        # Heartbeats (empty messages) may come first on a slow machine.
        while not (rows := (await anext(stream))[0]):
            pass
        return rows

    pending = asyncio.ensure_future(first_close())
    await asyncio.sleep(0.1)
    await store.close_session("live", SUCCEEDED, "")
    rows = await asyncio.wait_for(pending, 5)
    assert [s.session_id for s in rows] == ["live"]
    await stream.aclose()

    await write(store, [make_call("c", "s", [1], [[2]])])
    _, call_cursor = await anext(store.watch_calls("", full=False, max_batch_size=10))
    with pytest.raises(InvalidArgument, match="not a cursor of closes"):
        await anext(store.watch_closed_sessions(call_cursor, 10))


async def test_concurrent_closes_share_a_transaction_and_fail_alone(store: TokenStore) -> None:
    await store.close_session("done", FAILED, "")
    results = await asyncio.gather(
        *(store.close_session(f"s{i}", SUCCEEDED, "", {"i": str(i)}) for i in range(20)),
        store.close_session("done", SUCCEEDED, ""),
        store.close_session("s3", FAILED, ""),
        return_exceptions=True,
    )
    rows = [r for r in results[:20] if isinstance(r, SessionRow)]
    assert [r.metadata for r in rows] == [{"i": str(i)} for i in range(20)], results[:20]
    assert isinstance(results[20], FailedPrecondition) and isinstance(
        results[21], FailedPrecondition
    )
    seen, _ = await closes(store)
    assert len(seen) == 21 and len({s.close_seq for s in seen}) == 21


async def test_batch_get_returns_sessions_with_calls_and_rewards(store: TokenStore) -> None:
    multi = conversation("m", turns=4)
    await write(
        store,
        [*multi, make_call("x", "single", [1, 2], [[3]]), make_call("other", "o", [5], [[6]])],
    )
    await store.write_rewards(
        [reward("r1", "m", 1.0), reward("r2", "m", 0.5, call_id=multi[1].call_id)]
    )
    contents, missing = await store.batch_get_sessions(["single", "nope", "m", "single"], "full")
    assert [c.session.session_id for c in contents] == ["single", "m"] and missing == ["nope"]
    assert wire(contents[1].calls) == wire(multi)
    assert [r.reward_id for r in contents[1].rewards] == ["r1", "r2"] and contents[0].rewards == []
    basic, _ = await store.batch_get_sessions(["m"], "basic")
    assert basic[0].calls[0].prompt_token_ids == b"" and basic[0].session.call_count == 4
    with pytest.raises(InvalidArgument, match="at most 1000 sessions"):
        await store.batch_get_sessions([f"s{i}" for i in range(1001)], "basic")


async def test_the_spliced_view_rebuilds_every_prompt_exactly(store: TokenStore) -> None:
    multi = conversation("m", turns=6)
    edited = make_call("edited", "m", list(range(400)), [[1, 2]])
    await write(store, [*multi, edited, make_call("x", "single", [1, 2], [[3]])])
    contents, _ = await store.batch_get_sessions(["m", "single"], "spliced")
    for session in contents:
        splices = {p.call_id: p for p in session.splices}
        rebuilt: dict[str, bytes] = {}
        for call in session.calls:
            assert call.request_json == b""
            splice = splices.get(call.call_id)
            if splice is None:
                rebuilt[call.call_id] = call.prompt_token_ids
                continue
            assert call.prompt_token_ids == b""
            base_call = next(c for c in session.calls if c.call_id == splice.base_call_id)
            base = rebuilt[base_call.call_id] + (
                base_call.choices[splice.base_choice].token_ids if splice.base_choice >= 0 else b""
            )
            rebuilt[call.call_id] = splice_delta.decode(
                base, Splice(splice.prefix_tokens * 4, splice.suffix_tokens * 4, splice.middle)
            )
        full = {
            c.call_id: c.prompt_token_ids
            for c in [*multi, edited]
            if c.session_id == session.session.session_id
        }
        assert all(rebuilt[call_id] == prompt for call_id, prompt in full.items())
    assert len(contents[0].splices) == 5, "every turn after the first; the edit shares too little"


async def test_metadata_updates_apply_in_one_transaction_or_not_at_all(store: TokenStore) -> None:
    await write(
        store,
        [
            make_call(f"c{i}", f"s{i}", [1], [[2]], metadata={"keep": "k", "drop": "d"})
            for i in range(3)
        ],
    )
    changed = await store.update_session_metadata(
        [MetadataUpdate("s0", {"batch": "1"}, ["drop"]), MetadataUpdate("s1", {"batch": "1"}, [])]
    )
    assert changed == 2
    assert (await store.get_session("s0")).metadata == {"keep": "k", "batch": "1"}
    assert (
        await store.update_session_metadata([MetadataUpdate("s0", {"batch": "1"}, ["drop"])]) == 0
    )
    with pytest.raises(NotFound, match="unknown session"):
        await store.update_session_metadata(
            [MetadataUpdate("s2", {"batch": "2"}, []), MetadataUpdate("nope", {}, [])]
        )
    assert "batch" not in (await store.get_session("s2")).metadata
    with pytest.raises(InvalidArgument, match="session_id is required"):
        await store.update_session_metadata([MetadataUpdate("", {"a": "b"}, [])])


async def test_concurrent_reward_writes_fail_alone(store: TokenStore) -> None:
    await write(store, [make_call("c", "s", [1], [[2]])])
    good, bad, retry = await asyncio.gather(
        store.write_rewards([reward("r1", "s", 1.0)]),
        store.write_rewards([reward("r2", "nope", 1.0)]),
        store.write_rewards([reward("r1", "s", 1.0), reward("r3", "s", 0.0)]),
        return_exceptions=True,
    )
    assert (
        isinstance(bad, NotFound)
        and isinstance(good, WriteResult)
        and isinstance(retry, WriteResult)
    )
    assert (good.written + retry.written, good.duplicates + retry.duplicates) == (2, 1)
    listed, _ = await store.list_rewards("s", 100, "")
    assert sorted(r.reward_id for r in listed) == ["r1", "r3"]
    assert all(isinstance(r, reward_pb2.Reward) for r in listed)


@pytest.mark.parametrize("backend_url", ["sqlite", "postgresql"], indirect=True)
async def test_a_reopened_store_keeps_close_order_and_cursors(open_store) -> None:
    first = open_store()
    await first.start()
    await first.close_session("a", SUCCEEDED, "", {"group": "g"})
    seen, cursor = await closes(first)
    await first.stop()

    second = open_store()
    await second.start()
    await second.close_session("b", SUCCEEDED, "")
    resumed, _ = await closes(second, cursor)
    assert [s.session_id for s in seen + resumed] == ["a", "b"]
    assert (await second.get_session("a")).metadata == {"group": "g"}
    await second.stop()

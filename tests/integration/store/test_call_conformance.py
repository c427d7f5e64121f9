"""Calls on every backend: written and read back token-exact, stored once, paged, watched,
and refused when malformed. A backend that fails any of it is not done."""

from __future__ import annotations

import asyncio
import re

import pytest

from parity.api.common.v1 import llm_call_pb2
from parity.services.runtime.errors import InvalidArgument, NotFound
from parity.services.store.commits import WriteResult
from parity.services.store.records import MetadataUpdate, SessionQuery
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


async def test_a_prompt_that_continues_another_choice_references_that_choice(
    store: TokenStore,
) -> None:
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
    assert (
        basic.prompt_token_ids == b""
        and basic.request_json == b""
        and basic.choices[0].token_ids == b""
    )
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
        "parent_session_id": lambda: store.list_sessions(
            SessionQuery(parent_session_id="p\x00"), 10, ""
        ),
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
    assert isinstance(bad, InvalidArgument) and isinstance(good, WriteResult) and good.written == 1
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
    seen: list[llm_call_pb2.LlmCall] = []
    cursor = ""
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


async def test_a_watch_from_latest_sends_only_calls_committed_after_it_opened(
    store: TokenStore,
) -> None:
    await write(store, conversation("old", turns=3, prompt_len=10, completion_len=3))
    # A heartbeat at every empty read: the first message says the watch is open, its starting point taken.
    store.watch_heartbeat_s = 0.0
    stream = store.watch_calls("", full=False, max_batch_size=100, from_latest=True)
    opened, _ = await anext(stream)
    assert opened == [], "the calls stored before the watch opened are not sent"
    new = conversation("new", turns=2, prompt_len=10, completion_len=3)
    await write(store, new)
    calls: list = []
    while not calls:
        calls, _ = await anext(stream)
    assert [c.call_id for c in calls] == [c.call_id for c in new]
    await stream.aclose()

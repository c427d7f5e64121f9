"""Transactions on every backend: writes queued together commit together, a read sees one
moment, and what committed survives a reopen, a lost connection and a cancelled write.
A backend that fails any of it is not done."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import threading

import psycopg
import pytest

from parity.services.runtime.errors import Unavailable
from parity.services.store.backends.postgres import WRITER_APPLICATION_NAME
from parity.services.store.token_store import TokenStore
from tests.call_factory import conversation, make_call
from tests.integration.store.store_requests import all_calls, reward, wire, write


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


async def test_writes_queued_behind_a_commit_share_the_next_one(
    store: TokenStore, monkeypatch
) -> None:
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
    expected = (
        [make_call("first", "s", [0], [[0]])] + [batch[0] for batch in batches] + [batches[-1][1]]
    )
    assert wire(await all_calls(store, "s", page_size=100)) == wire(expected)


async def test_a_full_read_racing_a_delete_sees_the_calls_as_they_were(
    store: TokenStore, monkeypatch
) -> None:
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
        assert wire(await read()) == wire(calls[3:] if read is get_last else calls[2:]), (
            read.__name__
        )
        ((deleted, committed_mid_read),) = deletes
        assert committed_mid_read == (not memory), read.__name__
        assert await asyncio.wrap_future(deleted) == (1, 4, 1)
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
    assert (
        second.backend.get_call_rows([calls[3].call_id])[calls[3].call_id].ref_call_id
        == calls[2].call_id
    )
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
        writer = admin.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            (WRITER_APPLICATION_NAME,),
        ).fetchone()
        assert writer is not None, "the store's writer holds a connection"
        (pid,) = writer
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            await asyncio.sleep(0.01)
    with pytest.raises(Unavailable, match="lost the connection to PostgreSQL"):
        await asyncio.wait_for(write(store, [make_call("lost", "s", [1], [[2]])]), 10)
    after = await asyncio.wait_for(write(store, [make_call("after", "s", [1], [[2]])]), 10)
    assert after.written == 1
    assert [c.call_id for c in await all_calls(store, "s")] == ["before", "after"]


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

"""What only the SQLite backend promises: readers never hold up the writer, the
space it reports and keeps shrinks back after deletes and checkpoints, the WAL stays
bounded under writes that never pause, and a full disk fails writes cleanly."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import apsw
import pytest
from structlog.testing import capture_logs

from parity.api.common.v1 import llm_call_pb2
from parity.services.runtime.errors import NotFound, Unavailable
from parity.services.store.backends import sqlite, wal_checkpointer
from parity.services.store.backends.sqlite import SqliteBackend
from parity.services.store.token_store import TokenStore
from tests.call_factory import conversation, make_call


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[TokenStore]:
    token_store = TokenStore(SqliteBackend(tmp_path / "store.db"))
    await token_store.start()
    yield token_store
    await token_store.stop()


async def test_an_open_read_transaction_never_holds_up_writes(
    store: TokenStore, tmp_path: Path
) -> None:
    await store.write_calls([make_call("before", "s", [1], [[2]])])
    reader = apsw.Connection(str(tmp_path / "store.db"))
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM calls").fetchall() == [(1,)]
        for n in range(5):
            # Generous: the point is that a write does not wait for the reader to finish.
            result = await asyncio.wait_for(
                store.write_calls([make_call(f"c{n}", "s", [1], [[2]])]), 10
            )
            assert result.written == 1
        assert reader.execute("SELECT count(*) FROM calls").fetchall() == [(1,)], (
            "the reader keeps its snapshot"
        )
        reader.execute("COMMIT")
        assert reader.execute("SELECT count(*) FROM calls").fetchall() == [(6,)]
    finally:
        reader.close()


async def test_reported_bytes_leave_out_pages_freed_by_a_delete(store: TokenStore) -> None:
    for session in range(20):
        await store.write_calls(conversation(f"s{session}", turns=5))
    before = (await store.stats()).bytes_on_disk
    await store.delete_sessions([f"s{session}" for session in range(18)], None)
    after = await store.stats()
    assert after.call_count == 10
    assert after.bytes_on_disk < before * 0.3


WAL_LIMIT = 256 << 10


@pytest.fixture
async def small_wal_store(tmp_path: Path, monkeypatch) -> AsyncIterator[TokenStore]:
    """A store that checkpoints its WAL past WAL_LIMIT; the WAL is at tmp_path/store.db-wal."""
    monkeypatch.setattr(sqlite, "CHECKPOINT_WAL_BYTES", WAL_LIMIT)
    token_store = TokenStore(SqliteBackend(tmp_path / "store.db"))
    await token_store.start()
    yield token_store
    await token_store.stop()


def random_prompt(rng: random.Random, length: int) -> list[int]:
    # Random, so that no prompt shares a prefix the store would keep only once.
    return [rng.randrange(50_000) for _ in range(length)]


async def test_the_wal_is_truncated_back_after_a_checkpoint(
    small_wal_store: TokenStore, tmp_path: Path
) -> None:
    rng = random.Random(0)
    await small_wal_store.write_calls(
        [make_call(f"big{n}", f"s{n}", random_prompt(rng, 2000), [[1]]) for n in range(300)]
    )
    wal = tmp_path / "store.db-wal"
    assert wal.stat().st_size > 4 * WAL_LIMIT
    # The checkpointer copies the WAL into the database within a second; the first
    # commit after that starts the WAL over and truncates it to the limit.
    for n in range(100):
        await small_wal_store.write_calls([make_call(f"small{n}", "s", [1], [[2]])])
        if wal.stat().st_size <= WAL_LIMIT:
            break
        await asyncio.sleep(0.1)
    assert wal.stat().st_size <= WAL_LIMIT


async def test_the_wal_stays_bounded_under_writes_that_never_pause(
    small_wal_store: TokenStore, tmp_path: Path
) -> None:
    # SQLite starts the WAL over only after a checkpoint that copied all of it; with a
    # commit landing during every checkpoint, it would grow for as long as the load lasts.
    wal = tmp_path / "store.db-wal"
    rng = random.Random(0)
    largest = 0
    for n in range(1000):
        await small_wal_store.write_calls(
            [make_call(f"c{n}", f"s{n % 7}", random_prompt(rng, 500), [[1, 2, 3]])]
        )
        largest = max(largest, wal.stat().st_size)
    assert (await small_wal_store.stats()).bytes_on_disk > 10 * WAL_LIMIT, (
        "the load wrote many times the limit"
    )
    # Commits go on while the checkpointer works, so the WAL overshoots its limit by those.
    assert largest <= 3 * WAL_LIMIT


async def test_the_writer_bounds_the_wal_itself_when_the_checkpoint_thread_falls_behind(
    tmp_path: Path, monkeypatch
) -> None:
    # A thread that never gets the CPU, as on a machine whose cores are all busy.
    monkeypatch.setattr(wal_checkpointer.WalCheckpointer, "_checkpoint_when_due", lambda self: None)
    monkeypatch.setattr(sqlite, "CHECKPOINT_WAL_BYTES", WAL_LIMIT)
    token_store = TokenStore(SqliteBackend(tmp_path / "store.db"))
    await token_store.start()
    try:
        wal, rng, largest = tmp_path / "store.db-wal", random.Random(0), 0
        for n in range(1000):
            await token_store.write_calls(
                [make_call(f"c{n}", f"s{n % 7}", random_prompt(rng, 500), [[1, 2, 3]])]
            )
            largest = max(largest, wal.stat().st_size)
        assert (await token_store.stats()).bytes_on_disk > 10 * WAL_LIMIT, (
            "the load wrote many times the limit"
        )
        assert largest <= 3 * WAL_LIMIT
    finally:
        await token_store.stop()


async def test_a_reader_on_an_old_snapshot_delays_the_wal_starting_over_until_it_ends(
    small_wal_store: TokenStore, tmp_path: Path
) -> None:
    wal = tmp_path / "store.db-wal"
    rng = random.Random(0)

    async def write(count: int, prefix: str) -> None:
        for n in range(count):
            await small_wal_store.write_calls(
                [make_call(f"{prefix}{n}", "s", random_prompt(rng, 500), [[1]])]
            )

    await write(1, "first")
    reader = apsw.Connection(str(tmp_path / "store.db"))
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM calls").fetchall() == [(1,)]
        await write(300, "held")
        assert wal.stat().st_size > 3 * WAL_LIMIT, (
            "nothing past the reader's snapshot can be copied"
        )
        reader.execute("COMMIT")
        # The checkpoints run beside the writer: on a loaded machine the WAL can take more writes to start over.
        written = 0
        while wal.stat().st_size > 3 * WAL_LIMIT:
            assert written < 3000, "the WAL never started over once the reader ended"
            await write(50, f"after{written}-")
            written += 50
    finally:
        reader.close()


async def test_a_full_disk_fails_writes_as_unavailable_and_leaves_nothing_half_written(
    store: TokenStore,
) -> None:
    await store.write_calls([make_call("first", "s", [1], [[2]])])

    def big_calls() -> list[llm_call_pb2.LlmCall]:
        rng = random.Random(0)
        return [
            make_call(f"big{n}", f"t{n}", [rng.randrange(50_000) for _ in range(2000)], [[1]])
            for n in range(20)
        ]

    # SQLite's own size cap fails a transaction exactly as a full disk does (SQLITE_FULL).
    assert isinstance(store.backend, SqliteBackend)
    writer = store.backend._writer
    writer.execute(f"PRAGMA max_page_count={writer.execute('PRAGMA page_count').fetchall()[0][0]}")
    with (
        capture_logs() as logs,
        pytest.raises(Unavailable, match="disk is full.*writes resume once space is freed"),
    ):
        await store.write_calls(big_calls())
    # Callers retry while the disk stays full: one line each time, not a traceback.
    (failed,) = [entry for entry in logs if entry["event"] == "write_failed"]
    assert (
        failed["log_level"] == "warning"
        and "disk is full" in failed["error"]
        and "exc_info" not in failed
    )
    assert (await store.stats()).call_count == 1
    with pytest.raises(NotFound):
        await store.get_call("big0", full=False)

    writer.execute("PRAGMA max_page_count=4294967294")
    assert (await store.write_calls(big_calls())).written == 20
    assert (await store.stats()).call_count == 21

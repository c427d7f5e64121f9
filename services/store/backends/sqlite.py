"""`sqlite:///PATH`: the default backend, on APSW.

WAL mode, so readers (each worker thread has its own connection) never block the
single writer, and a read transaction sees one snapshot however long it lasts.
Commits are `synchronous=FULL` by default: WriteCalls answers only after the WAL is
fsynced. Add `?synchronous=NORMAL` to the URL to trade the last transactions before
a power loss (never a process crash) for throughput.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import apsw

from parity.services.runtime.errors import InvalidArgument, Unavailable
from parity.services.store.backends.base import StoreBackend
from parity.services.store.backends.reader_pool import ReaderPool
from parity.services.store.backends.sql_schema import (
    CALL_COLUMNS,
    REWARD_COLUMNS,
    SESSION_COLUMNS,
    SQLITE,
    SQLITE_MIGRATIONS,
    call_from_values,
    call_values,
    calls_by_trajectory,
    migrations_table,
    reward_from_values,
    session_from_values,
)
from parity.services.store.backends.sql_sessions import (
    Condition,
    NewSession,
    create_missing_sessions,
    delete_session_rows,
    one_row,
    session_trees,
    sessions_page_query,
    write_touched_sessions,
)
from parity.services.store.backends.wal_checkpointer import WalCheckpointer
from parity.services.store.records import (
    SESSION_STATE_CLOSED,
    BackendStats,
    CallBatch,
    CallRow,
    DeletedCounts,
    MetadataUpdate,
    RewardRow,
    SessionClose,
    SessionQuery,
    SessionRow,
)

SCHEMA_VERSION = len(SQLITE_MIGRATIONS)
_SYNCHRONOUS_MODES = ("FULL", "NORMAL", "EXTRA")
_MAX_SQL_VARIABLES = 500
# SQLite's default. Larger pages keep a call row of a few KB out of overflow chains,
# but every commit rewrites each page it touches (a dozen across the tables and
# indexes): with 64 KB pages, ingest's small steady commits wrote ~50 MB/s of WAL
# and stalled every fsync on the disk for hundreds of milliseconds.
PAGE_SIZE = 4096
CHECKPOINT_WAL_BYTES = 16 << 20


class SqliteBackend(StoreBackend):
    name = "sqlite"

    def __init__(self, path: Path, synchronous: str = "FULL") -> None:
        if synchronous not in _SYNCHRONOUS_MODES:
            raise InvalidArgument(
                f"synchronous must be one of {_SYNCHRONOUS_MODES}, got {synchronous!r}"
            )
        self.path = path
        self.synchronous = synchronous
        path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = self._connect()
        self._migrate()
        self.store_id = self._meta("store_id")
        self._readers = ReaderPool(self._connect)
        self._checkpointer = WalCheckpointer(path, self._connect, PAGE_SIZE, CHECKPOINT_WAL_BYTES)
        self._checkpointer.watch(self._writer)

    @classmethod
    def from_url(cls, url: str) -> SqliteBackend:
        parts = urlsplit(url)
        path = parts.path if not parts.netloc else f"{parts.netloc}{parts.path}"
        if not path or path == "/":
            raise InvalidArgument(
                f"sqlite URL needs a file path, e.g. sqlite:///var/parity/store.db; got {url!r}"
            )
        # sqlite:///rel/path and sqlite:////abs/path, as SQLAlchemy reads them.
        options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = options.keys() - {"synchronous"}
        if unknown:
            raise InvalidArgument(f"unknown sqlite URL option(s): {sorted(unknown)}")
        return cls(
            Path(path[1:] if path.startswith("/") else path),
            options.get("synchronous", "FULL").upper(),
        )

    def _connect(self) -> apsw.Connection:
        connection = apsw.Connection(str(self.path))
        connection.set_busy_timeout(10_000)
        # Before WAL is switched on, so it takes effect when the file is created.
        connection.execute(f"PRAGMA page_size={PAGE_SIZE}")
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={self.synchronous}")
        # Without a limit the WAL file keeps the size of the largest burst between
        # checkpoints forever; with it, the first commit after a checkpoint truncates it.
        # At the checkpoint threshold, steady writes reuse the file rather than regrow it.
        connection.execute(f"PRAGMA journal_size_limit={CHECKPOINT_WAL_BYTES}")
        return connection

    def _migrate(self) -> None:
        db = self._writer
        db.execute(migrations_table(SQLITE))
        (current,) = one_row(
            db.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
        )
        if current > SCHEMA_VERSION:
            raise InvalidArgument(
                f"{self.path} has schema version {current}, newer than this Parity's {SCHEMA_VERSION}"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            with db:
                for statement in SQLITE_MIGRATIONS[version - 1]:
                    db.execute(statement)
                if version == 1:
                    db.execute("INSERT INTO store_meta VALUES ('store_id', ?)", (uuid.uuid4().hex,))
                db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, time.time()))

    def _meta(self, key: str) -> str:
        return one_row(
            self._writer.execute("SELECT value FROM store_meta WHERE key = ?", (key,)).fetchone()
        )[0]

    # Writes: only the store's single writer calls these.
    @contextlib.contextmanager
    def _transaction(self) -> Iterator[apsw.Connection]:
        """One write transaction on the writer's connection. A full disk fails it as
        UNAVAILABLE, not INTERNAL: it rolled back whole, and the same write succeeds
        once there is room again (ingest spools meanwhile and replays)."""
        db = self._writer
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                # SQLite has already rolled back by itself after some errors (a full
                # disk among them); a second rollback would fail and hide the first error.
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except apsw.FullError as error:
            raise Unavailable(
                f"the store's disk is full ({self.path}: {error}); writes resume once space is freed"
            ) from None

    def existing_call_ids(self, call_ids: Iterable[str]) -> set[str]:
        return {
            r[0]
            for r in _select_in(self._writer, "SELECT call_id FROM calls WHERE call_id", call_ids)
        }

    def commit_calls(self, batch: CallBatch) -> None:
        with self._transaction() as db:
            write_touched_sessions(db.executemany, SQLITE, batch.sessions, _json)
            last = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'calls'").fetchall()
            next_seq = (_integer(last[0][0]) if last else 0) + 1
            for offset, row in enumerate(batch.calls):
                row.seq = next_seq + offset
            db.executemany(
                f"INSERT INTO calls ({CALL_COLUMNS}) VALUES ({','.join('?' * 16)})",
                [call_values(row) for row in batch.calls],
            )

    def insert_rewards(self, rewards: list[RewardRow]) -> list[bool]:
        inserted = []
        with self._transaction() as db:
            for reward in rewards:
                db.execute(
                    "INSERT INTO rewards (reward_id, session_id, body, create_time) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (reward_id) DO NOTHING",
                    (reward.reward_id, reward.session_id, reward.body, reward.create_time),
                )
                inserted.append(db.changes() == 1)
        return inserted

    def close_sessions(self, closes: list[SessionClose], time: float) -> list[SessionRow]:
        closed = []
        with self._transaction() as db:
            new: list[NewSession] = [(close.session_id, [], {}, time) for close in closes]
            create_missing_sessions(db.executemany, SQLITE, new, _json)
            (last_seq,) = one_row(
                db.execute("SELECT value FROM store_counters WHERE name = 'close_seq'").fetchone()
            )
            next_seq = last_seq + 1
            for close in closes:
                session = self._session(db, close.session_id)
                assert session is not None
                metadata = session.metadata | close.metadata
                if session.state != SESSION_STATE_CLOSED:
                    db.execute(
                        "UPDATE sessions SET state = ?, outcome = ?, error_message = ?, close_time = ?,"
                        " update_time = ?, close_seq = ?, metadata = ? WHERE session_id = ?",
                        (SESSION_STATE_CLOSED, close.outcome, close.error_message, time, time, next_seq,
                         _json(metadata), close.session_id),
                    )  # fmt: skip
                    next_seq += 1
                elif metadata != session.metadata:
                    db.execute(
                        "UPDATE sessions SET metadata = ? WHERE session_id = ?",
                        (_json(metadata), close.session_id),
                    )
                closed.append(self._session(db, close.session_id))
            db.execute(
                "UPDATE store_counters SET value = ? WHERE name = 'close_seq'", (next_seq - 1,)
            )
        return closed  # type: ignore[return-value]

    def update_session_metadata(self, updates: list[MetadataUpdate]) -> set[str]:
        changed = set()
        with self._transaction() as db:
            for update in updates:
                # A JSON merge patch (RFC 7396): a null value removes its key. The
                # comparison is on minified JSON, so a no-op patch changes nothing.
                patch = json.dumps(update.set_keys | dict.fromkeys(update.remove_keys))
                db.execute(
                    "UPDATE sessions SET metadata = json_patch(metadata, ?1)"
                    " WHERE session_id = ?2 AND json(metadata) != json_patch(metadata, ?1)",
                    (patch, update.session_id),
                )
                if db.changes():
                    changed.add(update.session_id)
        return changed

    def delete_sessions(
        self, session_ids: list[str], updated_before: float | None, end_user_id: str = ""
    ) -> DeletedCounts:
        with self._transaction() as db:

            def run(sql: str, params: Sequence[object] = ()) -> int:
                db.execute(sql, params)
                return db.changes()

            # The ids go through a table: SQLite binds a limited number of parameters.
            run("CREATE TEMP TABLE IF NOT EXISTS doomed (session_id TEXT PRIMARY KEY)")
            run("DELETE FROM doomed")
            db.executemany("INSERT OR IGNORE INTO doomed VALUES (?)", [(s,) for s in session_ids])
            in_doomed = "session_id IN (SELECT session_id FROM doomed)"
            trees, params = session_trees(SQLITE, (in_doomed, []), updated_before, end_user_id)
            run(f"{trees} INSERT OR IGNORE INTO doomed SELECT session_id FROM tree", params)
            return delete_session_rows(run, (in_doomed, []))

    # Reads: any thread, each on its own connection.
    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        db = self._readers.connection()
        # Deferred: the snapshot is taken by the first read and held until the end.
        db.execute("BEGIN")
        try:
            yield
        finally:
            # Not COMMIT: it fails while a statement is still pending (after an error
            # mid-read) and would leave this thread's connection stuck in the snapshot.
            db.execute("ROLLBACK")

    def get_call_rows(self, call_ids: Iterable[str]) -> dict[str, CallRow]:
        rows = self._read_in(f"SELECT {CALL_COLUMNS} FROM calls WHERE call_id", call_ids)
        return {row.call_id: row for row in map(call_from_values, rows)}

    def last_trajectory_calls(
        self, keys: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], CallRow]:
        wanted = set(keys)
        rows = self._read_in(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE seq IN (SELECT max(seq) FROM calls WHERE session_id",
            sorted({session_id for session_id, _ in wanted}),
            " GROUP BY session_id, trajectory_name)",
        )
        return calls_by_trajectory(rows, wanted)

    def list_call_rows(self, session_id: str, after_seq: int, limit: int) -> list[CallRow]:
        rows = self._read(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (session_id, after_seq, limit),
        )
        return [call_from_values(v) for v in rows]

    def call_rows_after(self, seq: int, limit: int) -> list[CallRow]:
        rows = self._read(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit)
        )
        return [call_from_values(v) for v in rows]

    def get_reward_rows(self, reward_ids: Iterable[str]) -> dict[str, RewardRow]:
        rows = self._read_in(f"SELECT {REWARD_COLUMNS} FROM rewards WHERE reward_id", reward_ids)
        return {row.reward_id: row for row in map(reward_from_values, rows)}

    def list_reward_rows(self, session_id: str, after_key: int, limit: int) -> list[RewardRow]:
        rows = self._read(
            f"SELECT {REWARD_COLUMNS} FROM rewards WHERE session_id = ? AND key > ? ORDER BY key LIMIT ?",
            (session_id, after_key, limit),
        )
        return [reward_from_values(v) for v in rows]

    def session_call_rows(self, session_ids: Iterable[str]) -> list[CallRow]:
        rows = self._read_in(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE session_id", session_ids, " ORDER BY seq"
        )
        return sorted(map(call_from_values, rows), key=lambda row: row.seq)

    def session_reward_rows(self, session_ids: Iterable[str]) -> list[RewardRow]:
        rows = self._read_in(
            f"SELECT {REWARD_COLUMNS} FROM rewards WHERE session_id", session_ids, " ORDER BY key"
        )
        return sorted(map(reward_from_values, rows), key=lambda row: row.key)

    def get_sessions(self, session_ids: Iterable[str]) -> dict[str, SessionRow]:
        rows = self._read_in(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id", session_ids
        )
        return {session.session_id: session for session in map(session_from_values, rows)}

    def sessions_closed_after(self, close_seq: int, limit: int) -> list[SessionRow]:
        rows = self._read(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE close_seq > ? ORDER BY close_seq LIMIT ?",
            (close_seq, limit),
        )
        return [session_from_values(v) for v in rows]

    def get_session(self, session_id: str) -> SessionRow | None:
        return self._session(self._readers.connection(), session_id)

    @staticmethod
    def _session(db: apsw.Connection, session_id: str) -> SessionRow | None:
        values = db.execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        return session_from_values(values) if values else None

    def list_sessions(self, query: SessionQuery, position: int, limit: int) -> list[SessionRow]:
        filters: list[Condition] = []
        if query.session_id_prefix:
            filters.append(
                (
                    "substr(session_id, 1, ?) = ?",
                    [len(query.session_id_prefix), query.session_id_prefix],
                )
            )
        # json_each rather than a JSON path: a key may hold any character, quotes included.
        filters += [
            (
                "EXISTS (SELECT 1 FROM json_each(sessions.metadata) WHERE key = ? AND value = ?)",
                [key, value],
            )
            for key, value in query.metadata
        ]
        sql, params = sessions_page_query(SQLITE, query, position, limit, filters)
        return [session_from_values(v) for v in self._read(sql, params)]

    def latest_call_seq(self) -> int:
        return int(one_row(self._read("SELECT coalesce(max(seq), 0) FROM calls").fetchone())[0])

    def stats(self) -> BackendStats:
        # Bytes are the pages in use, not file sizes: the file keeps pages freed by deletes
        # for later writes to reuse, and the WAL holds copies of pages counted here (a
        # reader's page count includes pages not yet checkpointed), so either would count
        # space no data needs.
        sessions, calls, rewards, tokens, used_bytes = one_row(
            self._read(
                "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM calls),"
                " (SELECT count(*) FROM rewards), (SELECT coalesce(sum(logical_tokens), 0) FROM calls),"
                " ((SELECT page_count FROM pragma_page_count())"
                " - (SELECT freelist_count FROM pragma_freelist_count()))"
                " * (SELECT page_size FROM pragma_page_size())"
            ).fetchone()
        )
        return BackendStats(sessions, calls, rewards, tokens, used_bytes)

    def close(self) -> None:
        self._checkpointer.close()
        self._readers.close()
        self._writer.close()

    def _read(self, sql: str, params: Sequence[object] = ()) -> apsw.Cursor:
        return self._readers.connection().execute(sql, params)

    def _read_in(self, select: str, values: Iterable[str], tail: str = "") -> Iterator[Any]:
        return _select_in(self._readers.connection(), select, values, tail)


def _json(value: list[str] | dict[str, str]) -> str:
    # Most sessions have neither parents nor metadata; skip the encoder for them.
    return json.dumps(value) if value else ("[]" if isinstance(value, list) else "{}")


def _select_in(
    db: apsw.Connection, select: str, values: Iterable[str], tail: str = ""
) -> Iterator[Any]:
    """The rows of `{select} IN (values){tail}`, in as many statements as SQLite's
    limit on bound variables takes."""
    values = list(values)
    for start in range(0, len(values), _MAX_SQL_VARIABLES):
        chunk = values[start : start + _MAX_SQL_VARIABLES]
        yield from db.execute(f"{select} IN ({','.join('?' * len(chunk))}){tail}", chunk)


def _integer(value: object) -> int:
    """An INTEGER column's value (apsw types a column as any SQLite value)."""
    assert isinstance(value, int), value
    return value

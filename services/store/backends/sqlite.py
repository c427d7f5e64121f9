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
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import apsw
import structlog

from parity.services.runtime.errors import InvalidArgument, Unavailable
from parity.services.store.backends.base import StoreBackend
from parity.services.store.backends.sql_schema import (
    CALL_COLUMNS,
    REWARD_COLUMNS,
    SESSION_COLUMNS,
    call_from_values,
    call_values,
    reward_from_values,
    session_from_values,
)
from parity.services.store.backends.wal_checkpointer import WalCheckpointer
from parity.services.store.records import (
    SESSION_STATE_CLOSED,
    SESSION_STATE_OPEN,
    BackendStats,
    CallBatch,
    CallRow,
    MetadataUpdate,
    RewardRow,
    SessionClose,
    SessionQuery,
    SessionRow,
)

log = structlog.get_logger(__name__)

# Each entry migrates the schema from version N-1 to N, in one transaction.
MIGRATIONS: list[list[str]] = [
    [
        "CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE sessions (
            key INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL UNIQUE,
            parent_session_id TEXT,
            parent_session_ids TEXT NOT NULL,
            metadata TEXT NOT NULL,
            state INTEGER NOT NULL,
            outcome INTEGER NOT NULL,
            error_message TEXT NOT NULL,
            call_count INTEGER NOT NULL,
            create_time REAL NOT NULL,
            update_time REAL NOT NULL,
            close_time REAL)""",
        "CREATE INDEX sessions_by_parent ON sessions (parent_session_id, key)",
        "CREATE INDEX sessions_by_state ON sessions (state, key)",
        "CREATE INDEX sessions_by_update_time ON sessions (update_time)",
        # AUTOINCREMENT: a sequence number is never reused after a delete, so a
        # watch cursor can never point at a different call than it did.
        """CREATE TABLE calls (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            call_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            trajectory_name TEXT NOT NULL,
            ref_call_id TEXT,
            ref_choice INTEGER NOT NULL,
            ref_depth INTEGER NOT NULL,
            prompt_prefix INTEGER NOT NULL,
            prompt_suffix INTEGER NOT NULL,
            prompt_middle BLOB NOT NULL,
            request_prefix INTEGER NOT NULL,
            request_suffix INTEGER NOT NULL,
            request_middle BLOB NOT NULL,
            body BLOB NOT NULL,
            logical_tokens INTEGER NOT NULL,
            create_time REAL NOT NULL)""",
        "CREATE INDEX calls_by_session ON calls (session_id, seq)",
        """CREATE TABLE rewards (
            key INTEGER PRIMARY KEY AUTOINCREMENT,
            reward_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            body BLOB NOT NULL,
            create_time REAL NOT NULL)""",
        "CREATE INDEX rewards_by_session ON rewards (session_id, key)",
    ],
    [
        # Close order, for the watch of closes. A counter rather than max(close_seq) + 1,
        # so a number is never reused after the session holding it is deleted.
        "ALTER TABLE sessions ADD COLUMN close_seq INTEGER",
        # Sessions closed before this version are numbered in the order they closed.
        "UPDATE sessions SET close_seq = numbered.n FROM (SELECT key, row_number() OVER"
        " (ORDER BY close_time, key) AS n FROM sessions WHERE close_time IS NOT NULL) AS numbered"
        " WHERE sessions.key = numbered.key",
        "CREATE UNIQUE INDEX sessions_by_close_seq ON sessions (close_seq)",
        "CREATE TABLE store_counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        "INSERT INTO store_counters SELECT 'close_seq', coalesce(max(close_seq), 0) FROM sessions",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)
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
            raise InvalidArgument(f"synchronous must be one of {_SYNCHRONOUS_MODES}, got {synchronous!r}")
        self.path = path
        self.synchronous = synchronous
        path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = self._connect()
        self._migrate()
        self.store_id = self._meta("store_id")
        self._local = threading.local()
        self._readers: list[apsw.Connection] = []
        self._readers_lock = threading.Lock()
        self._checkpointer = WalCheckpointer(path, self._connect, PAGE_SIZE, CHECKPOINT_WAL_BYTES)
        self._checkpointer.watch(self._writer)

    @classmethod
    def from_url(cls, url: str) -> SqliteBackend:
        parts = urlsplit(url)
        path = parts.path if not parts.netloc else f"{parts.netloc}{parts.path}"
        if not path or path == "/":
            raise InvalidArgument(f"sqlite URL needs a file path, e.g. sqlite:///var/parity/store.db; got {url!r}")
        # sqlite:///rel/path and sqlite:////abs/path, as SQLAlchemy reads them.
        options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = options.keys() - {"synchronous"}
        if unknown:
            raise InvalidArgument(f"unknown sqlite URL option(s): {sorted(unknown)}")
        return cls(Path(path[1:] if path.startswith("/") else path), options.get("synchronous", "FULL").upper())

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

    def _reader(self) -> apsw.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._connect()
            with self._readers_lock:
                self._readers.append(connection)
        return connection

    def _migrate(self) -> None:
        db = self._writer
        db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
        current = db.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchall()[0][0]
        if current > SCHEMA_VERSION:
            raise InvalidArgument(
                f"{self.path} has schema version {current}, newer than this Parity's {SCHEMA_VERSION}"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            with db:
                for statement in MIGRATIONS[version - 1]:
                    db.execute(statement)
                if version == 1:
                    db.execute("INSERT INTO store_meta VALUES ('store_id', ?)", (uuid.uuid4().hex,))
                db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, time.time()))

    def _meta(self, key: str) -> str:
        return self._writer.execute("SELECT value FROM store_meta WHERE key = ?", (key,)).fetchall()[0][0]

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
        found: set[str] = set()
        for chunk in _chunks(list(call_ids)):
            marks = ",".join("?" * len(chunk))
            found.update(r[0] for r in self._writer.execute(f"SELECT call_id FROM calls WHERE call_id IN ({marks})", chunk))
        return found

    def commit_calls(self, batch: CallBatch) -> None:
        with self._transaction() as db:
            # A session first created as an ancestor or by a close takes its parents and
            # metadata from its own calls; once set, they are never rewritten.
            db.executemany(
                "INSERT INTO sessions (session_id, parent_session_id, parent_session_ids, metadata, state, outcome,"
                " error_message, call_count, create_time, update_time) VALUES (?, ?, ?, ?, ?, 0, '', ?, ?, ?)"
                " ON CONFLICT (session_id) DO UPDATE SET call_count = call_count + excluded.call_count,"
                " update_time = excluded.update_time,"
                " parent_session_id = coalesce(parent_session_id, excluded.parent_session_id),"
                " parent_session_ids = iif(parent_session_id IS NULL,"
                " excluded.parent_session_ids, parent_session_ids),"
                " metadata = iif(json(metadata) = '{}', excluded.metadata, metadata)",
                [
                    (t.session_id, t.parent_session_ids[-1] if t.parent_session_ids else None,
                     _json(t.parent_session_ids), _json(t.metadata), SESSION_STATE_OPEN, t.added_calls, t.time, t.time)
                    for t in batch.sessions
                ],
            )  # fmt: skip
            # After the sessions' own rows, so a session's metadata wins over its
            # creation as some other session's ancestor in the same batch.
            ancestors = [(a, t.parent_session_ids[:d], {}, t.time) for t in batch.sessions
                         for d, a in enumerate(t.parent_session_ids)]  # fmt: skip
            if ancestors:
                self._insert_sessions(ancestors)
            last = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'calls'").fetchall()
            next_seq = (last[0][0] if last else 0) + 1
            for offset, row in enumerate(batch.calls):
                row.seq = next_seq + offset
            db.executemany(
                f"INSERT INTO calls ({CALL_COLUMNS}) VALUES ({','.join('?' * 16)})",
                [call_values(row) for row in batch.calls],
            )

    def _insert_sessions(self, sessions: list[tuple[str, list[str], dict[str, str], float]]) -> None:
        """Insert (session_id, parents, metadata, time) rows; existing sessions are left as they are."""
        self._writer.executemany(
            "INSERT INTO sessions (session_id, parent_session_id, parent_session_ids, metadata, state, outcome,"
            " error_message, call_count, create_time, update_time) VALUES (?, ?, ?, ?, ?, 0, '', 0, ?, ?)"
            " ON CONFLICT (session_id) DO NOTHING",
            [
                (sid, parents[-1] if parents else None, _json(parents), _json(meta), SESSION_STATE_OPEN, now, now)
                for sid, parents, meta, now in sessions
            ],
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
            self._insert_sessions([(close.session_id, [], {}, time) for close in closes])
            next_seq = db.execute("SELECT value FROM store_counters WHERE name = 'close_seq'").fetchall()[0][0] + 1
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
                    db.execute("UPDATE sessions SET metadata = ? WHERE session_id = ?", (_json(metadata), close.session_id))
                closed.append(self._session(db, close.session_id))
            db.execute("UPDATE store_counters SET value = ? WHERE name = 'close_seq'", (next_seq - 1,))
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

    def delete_sessions(self, session_ids: list[str], updated_before: float | None) -> tuple[int, int]:
        with self._transaction() as db:
            db.execute("CREATE TEMP TABLE IF NOT EXISTS doomed (session_id TEXT PRIMARY KEY)")
            db.execute("DELETE FROM doomed")
            db.executemany("INSERT OR IGNORE INTO doomed VALUES (?)", [(s,) for s in session_ids])
            if updated_before is not None:
                db.execute("INSERT OR IGNORE INTO doomed SELECT session_id FROM sessions WHERE update_time < ?", (updated_before,))
            db.execute(
                "WITH RECURSIVE tree(session_id) AS (SELECT session_id FROM doomed UNION"
                " SELECT s.session_id FROM sessions s JOIN tree t ON s.parent_session_id = t.session_id)"
                " INSERT OR IGNORE INTO doomed SELECT session_id FROM tree"
            )
            db.execute("DELETE FROM calls WHERE session_id IN (SELECT session_id FROM doomed)")
            call_count = db.changes()
            db.execute("DELETE FROM rewards WHERE session_id IN (SELECT session_id FROM doomed)")
            db.execute("DELETE FROM sessions WHERE session_id IN (SELECT session_id FROM doomed)")
            session_count = db.changes()
        return session_count, call_count

    # Reads: any thread, each on its own connection.
    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        db = self._reader()
        # Deferred: the snapshot is taken by the first read and held until the end.
        db.execute("BEGIN")
        try:
            yield
        finally:
            # Not COMMIT: it fails while a statement is still pending (after an error
            # mid-read) and would leave this thread's connection stuck in the snapshot.
            db.execute("ROLLBACK")

    def get_call_rows(self, call_ids: Iterable[str]) -> dict[str, CallRow]:
        rows: dict[str, CallRow] = {}
        for chunk in _chunks(list(call_ids)):
            marks = ",".join("?" * len(chunk))
            for values in self._reader().execute(f"SELECT {CALL_COLUMNS} FROM calls WHERE call_id IN ({marks})", chunk):
                row = call_from_values(values)
                rows[row.call_id] = row
        return rows

    def last_trajectory_calls(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], CallRow]:
        wanted = set(keys)
        found: dict[tuple[str, str], CallRow] = {}
        for chunk in _chunks(sorted({session_id for session_id, _ in wanted})):
            marks = ",".join("?" * len(chunk))
            for values in self._reader().execute(
                f"SELECT {CALL_COLUMNS} FROM calls WHERE seq IN (SELECT max(seq) FROM calls"
                f" WHERE session_id IN ({marks}) GROUP BY session_id, trajectory_name)",
                chunk,
            ):
                row = call_from_values(values)
                if (row.session_id, row.trajectory_name) in wanted:
                    found[row.session_id, row.trajectory_name] = row
        return found

    def list_call_rows(self, session_id: str, after_seq: int, limit: int) -> list[CallRow]:
        return [
            call_from_values(v)
            for v in self._reader().execute(
                f"SELECT {CALL_COLUMNS} FROM calls WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (session_id, after_seq, limit),
            )
        ]

    def call_rows_after(self, seq: int, limit: int) -> list[CallRow]:
        return [
            call_from_values(v)
            for v in self._reader().execute(
                f"SELECT {CALL_COLUMNS} FROM calls WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit)
            )
        ]

    def list_reward_rows(self, session_id: str, after_key: int, limit: int) -> list[RewardRow]:
        return [
            reward_from_values(v)
            for v in self._reader().execute(
                f"SELECT {REWARD_COLUMNS} FROM rewards WHERE session_id = ? AND key > ? ORDER BY key LIMIT ?",
                (session_id, after_key, limit),
            )
        ]

    def session_call_rows(self, session_ids: Iterable[str]) -> list[CallRow]:
        rows = []
        for chunk in _chunks(list(session_ids)):
            marks = ",".join("?" * len(chunk))
            rows += map(call_from_values, self._reader().execute(
                f"SELECT {CALL_COLUMNS} FROM calls WHERE session_id IN ({marks}) ORDER BY seq", chunk))  # fmt: skip
        return sorted(rows, key=lambda row: row.seq)

    def session_reward_rows(self, session_ids: Iterable[str]) -> list[RewardRow]:
        rows = []
        for chunk in _chunks(list(session_ids)):
            marks = ",".join("?" * len(chunk))
            rows += map(reward_from_values, self._reader().execute(
                f"SELECT {REWARD_COLUMNS} FROM rewards WHERE session_id IN ({marks}) ORDER BY key", chunk))  # fmt: skip
        return sorted(rows, key=lambda row: row.key)

    def get_sessions(self, session_ids: Iterable[str]) -> dict[str, SessionRow]:
        found = {}
        for chunk in _chunks(list(session_ids)):
            marks = ",".join("?" * len(chunk))
            for values in self._reader().execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id IN ({marks})", chunk
            ):
                session = session_from_values(values)
                found[session.session_id] = session
        return found

    def sessions_closed_after(self, close_seq: int, limit: int) -> list[SessionRow]:
        return [
            session_from_values(v)
            for v in self._reader().execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE close_seq > ? ORDER BY close_seq LIMIT ?",
                (close_seq, limit),
            )
        ]

    def get_session(self, session_id: str) -> SessionRow | None:
        return self._session(self._reader(), session_id)

    @staticmethod
    def _session(db: apsw.Connection, session_id: str) -> SessionRow | None:
        values = db.execute(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ?", (session_id,)).fetchall()
        return session_from_values(values[0]) if values else None

    def list_sessions(self, query: SessionQuery, position: int, limit: int) -> list[SessionRow]:
        where: list[str] = []
        params: list[object] = []
        if position:
            where.append("key < ?" if query.newest_first else "key > ?")
            params.append(position)
        if query.state is not None:
            where.append("state = ?")
            params.append(query.state)
        if query.parent_session_id is not None:
            where.append("parent_session_id = ?")
            params.append(query.parent_session_id)
        if query.outcome is not None:
            where.append("outcome = ?")
            params.append(query.outcome)
        if query.session_id_prefix:
            where.append("substr(session_id, 1, ?) = ?")
            params += [len(query.session_id_prefix), query.session_id_prefix]
        for key, value in query.metadata:
            # json_each rather than a JSON path: a key may hold any character, quotes included.
            where.append("EXISTS (SELECT 1 FROM json_each(sessions.metadata) WHERE key = ? AND value = ?)")
            params += [key, value]
        condition = f"WHERE {' AND '.join(where)}" if where else ""
        order = "DESC" if query.newest_first else ""
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions {condition} ORDER BY key {order} LIMIT ?"
        return [session_from_values(v) for v in self._reader().execute(sql, (*params, limit))]

    def latest_call_seq(self) -> int:
        return int(self._reader().execute("SELECT coalesce(max(seq), 0) FROM calls").fetchall()[0][0])

    def stats(self) -> BackendStats:
        # Bytes are the pages in use, not file sizes: the file keeps pages freed by deletes
        # for later writes to reuse, and the WAL holds copies of pages counted here (a
        # reader's page count includes pages not yet checkpointed), so either would count
        # space no data needs.
        sessions, calls, rewards, tokens, used_bytes = self._reader().execute(
            "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM calls),"
            " (SELECT count(*) FROM rewards), (SELECT coalesce(sum(logical_tokens), 0) FROM calls),"
            " ((SELECT page_count FROM pragma_page_count()) - (SELECT freelist_count FROM pragma_freelist_count()))"
            " * (SELECT page_size FROM pragma_page_size())"
        ).fetchall()[0]
        return BackendStats(sessions, calls, rewards, tokens, used_bytes)

    def close(self) -> None:
        self._checkpointer.close()
        with self._readers_lock:
            for connection in self._readers:
                connection.close()
            self._readers.clear()
        self._writer.close()


def _json(value: list[str] | dict[str, str]) -> str:
    # Most sessions have neither parents nor metadata; skip the encoder for them.
    return json.dumps(value) if value else ("[]" if isinstance(value, list) else "{}")


def _chunks(values: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(values), _MAX_SQL_VARIABLES):
        yield values[start : start + _MAX_SQL_VARIABLES]

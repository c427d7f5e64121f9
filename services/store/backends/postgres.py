"""`postgresql://USER@HOST:PORT/DB`: the store past one machine, on a real PostgreSQL.

Commit order is what watch cursors rely on. Every call write first bumps one
counter row and takes its sequence numbers from it; the row lock it holds until
commit means a later writer can only number its calls after the earlier one has
committed, so several store processes can share one database without a watcher
ever seeing call N+1 before call N.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterable, Iterator

import psycopg
import structlog
from psycopg.types.json import Jsonb

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

MIGRATIONS: list[list[str]] = [
    [
        "CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE store_counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
        "INSERT INTO store_counters VALUES ('call_seq', 0)",
        """CREATE TABLE sessions (
            key BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            session_id TEXT NOT NULL UNIQUE,
            parent_session_id TEXT,
            parent_session_ids JSONB NOT NULL,
            metadata JSONB NOT NULL,
            state SMALLINT NOT NULL,
            outcome SMALLINT NOT NULL,
            error_message TEXT NOT NULL,
            call_count BIGINT NOT NULL,
            create_time DOUBLE PRECISION NOT NULL,
            update_time DOUBLE PRECISION NOT NULL,
            close_time DOUBLE PRECISION)""",
        "CREATE INDEX sessions_by_parent ON sessions (parent_session_id, key)",
        "CREATE INDEX sessions_by_state ON sessions (state, key)",
        "CREATE INDEX sessions_by_update_time ON sessions (update_time)",
        """CREATE TABLE calls (
            seq BIGINT PRIMARY KEY,
            call_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            trajectory_name TEXT NOT NULL,
            ref_call_id TEXT,
            ref_choice INTEGER NOT NULL,
            ref_depth INTEGER NOT NULL,
            prompt_prefix INTEGER NOT NULL,
            prompt_suffix INTEGER NOT NULL,
            prompt_middle BYTEA NOT NULL,
            request_prefix INTEGER NOT NULL,
            request_suffix INTEGER NOT NULL,
            request_middle BYTEA NOT NULL,
            body BYTEA NOT NULL,
            logical_tokens INTEGER NOT NULL,
            create_time DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX calls_by_session ON calls (session_id, seq)",
        """CREATE TABLE rewards (
            key BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            reward_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            body BYTEA NOT NULL,
            create_time DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX rewards_by_session ON rewards (session_id, key)",
    ],
    [
        # Close order, numbered from a counter row like calls, so several store
        # processes close sessions in one order and a number is never reused.
        "ALTER TABLE sessions ADD COLUMN close_seq BIGINT",
        # Sessions closed before this version are numbered in the order they closed.
        "UPDATE sessions SET close_seq = numbered.n FROM (SELECT key, row_number() OVER"
        " (ORDER BY close_time, key) AS n FROM sessions WHERE close_time IS NOT NULL) AS numbered"
        " WHERE sessions.key = numbered.key",
        "CREATE UNIQUE INDEX sessions_by_close_seq ON sessions (close_seq)",
        "INSERT INTO store_counters SELECT 'close_seq', coalesce(max(close_seq), 0) FROM sessions",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)
# Any constant shared by every Parity store process; serializes migrations.
_MIGRATION_LOCK = 0x5041524954
# How the store's connections show in pg_stat_activity, unless the URL names them.
WRITER_APPLICATION_NAME = "parity-store-writer"
READER_APPLICATION_NAME = "parity-store-reader"

log = structlog.get_logger(__name__)


class PostgresBackend(StoreBackend):
    name = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url
        # Autocommit outside explicit `transaction()` blocks, so no write is ever left
        # waiting in an implicit transaction.
        self._writer = self._connect(WRITER_APPLICATION_NAME)
        self._migrate()
        self.store_id = self._writer.execute("SELECT value FROM store_meta WHERE key = 'store_id'").fetchone()[0]
        self._local = threading.local()
        self._readers: list[psycopg.Connection] = []
        self._readers_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str) -> PostgresBackend:
        return cls(url)

    def _connect(self, application_name: str) -> psycopg.Connection:
        try:
            return psycopg.connect(
                self.url, autocommit=True, fallback_application_name=application_name
            )
        except psycopg.OperationalError as error:
            raise Unavailable(f"cannot connect to PostgreSQL: {error}".strip()) from None
        except psycopg.ProgrammingError as error:
            raise InvalidArgument(f"invalid PostgreSQL URL: {error}") from None

    def _reader(self) -> psycopg.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None or connection.closed:
            # Autocommit: every read sees everything committed before it started.
            connection = self._local.connection = self._connect(READER_APPLICATION_NAME)
            with self._readers_lock:
                self._readers.append(connection)
        return connection

    def _migrate(self) -> None:
        db = self._writer
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
            current = db.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]
            if current > SCHEMA_VERSION:
                raise InvalidArgument(f"database has schema version {current}, newer than this Parity's {SCHEMA_VERSION}")
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version - 1]:
                    db.execute(statement)
                if version == 1:
                    db.execute("INSERT INTO store_meta VALUES ('store_id', %s)", (uuid.uuid4().hex,))
                db.execute("INSERT INTO schema_migrations VALUES (%s, %s)", (version, time.time()))

    @contextlib.contextmanager
    def _writing(self) -> Iterator[psycopg.Connection]:
        """The writer's connection, reopened if the last one was lost (a database restart,
        a failover, pg_terminate_backend). The write that loses it fails UNAVAILABLE, not
        INTERNAL: the caller may retry it, and every write is idempotent."""
        if self._writer.closed:
            log.info("postgres_writer_reconnecting")
            self._writer = self._connect(WRITER_APPLICATION_NAME)
        try:
            yield self._writer
        except psycopg.errors.DiskFull as error:
            # As on SQLite: the transaction rolled back, and the write succeeds once there is room.
            raise Unavailable(f"PostgreSQL is out of disk space ({error}); writes resume once space is freed") from None
        except psycopg.OperationalError as error:
            if not self._writer.broken:
                raise
            raise Unavailable(f"lost the connection to PostgreSQL: {error}".strip()) from None

    # Writes.
    def existing_call_ids(self, call_ids: Iterable[str]) -> set[str]:
        with self._writing() as db:
            rows = db.execute(
                "SELECT call_id FROM calls WHERE call_id = ANY(%s)", (list(call_ids),)
            )
            return {r[0] for r in rows}

    def commit_calls(self, batch: CallBatch) -> None:
        with self._writing() as db, db.transaction():
            (last,) = db.execute(
                "UPDATE store_counters SET value = value + %s WHERE name = 'call_seq' RETURNING value",
                (len(batch.calls),),
            ).fetchone()
            for offset, row in enumerate(batch.calls):
                row.seq = last - len(batch.calls) + 1 + offset
            with db.cursor() as cursor:
                # A session first created as an ancestor or by a close takes its parents and
                # metadata from its own calls; once set, they are never rewritten.
                cursor.executemany(
                    "INSERT INTO sessions (session_id, parent_session_id, parent_session_ids, metadata, state,"
                    " outcome, error_message, call_count, create_time, update_time)"
                    " VALUES (%s, %s, %s, %s, %s, 0, '', %s, %s, %s) ON CONFLICT (session_id) DO UPDATE"
                    " SET call_count = sessions.call_count + excluded.call_count,"
                    " update_time = excluded.update_time,"
                    " parent_session_id ="
                    " coalesce(sessions.parent_session_id, excluded.parent_session_id),"
                    " parent_session_ids = CASE WHEN sessions.parent_session_id IS NULL"
                    " THEN excluded.parent_session_ids ELSE sessions.parent_session_ids END,"
                    " metadata = CASE WHEN sessions.metadata = '{}'"
                    " THEN excluded.metadata ELSE sessions.metadata END",
                    [
                        (t.session_id, t.parent_session_ids[-1] if t.parent_session_ids else None,
                         Jsonb(t.parent_session_ids), Jsonb(t.metadata), SESSION_STATE_OPEN, t.added_calls,
                         t.time, t.time)
                        for t in batch.sessions
                    ],
                )  # fmt: skip
                # After the sessions' own rows, so a session's metadata wins over its
                # creation as some other session's ancestor in the same batch.
                ancestors = [(a, t.parent_session_ids[:d], {}, t.time) for t in batch.sessions
                             for d, a in enumerate(t.parent_session_ids)]  # fmt: skip
                if ancestors:
                    self._insert_sessions(db, ancestors)
                with cursor.copy(f"COPY calls ({CALL_COLUMNS}) FROM STDIN") as copy:
                    for row in batch.calls:
                        copy.write_row(call_values(row))

    @staticmethod
    def _insert_sessions(
        db: psycopg.Connection, sessions: list[tuple[str, list[str], dict[str, str], float]]
    ) -> None:
        """Insert (session_id, parents, metadata, time) rows; existing sessions are left as they are."""
        with db.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO sessions (session_id, parent_session_id, parent_session_ids, metadata, state, outcome,"
                " error_message, call_count, create_time, update_time) VALUES (%s, %s, %s, %s, %s, 0, '', 0, %s, %s)"
                " ON CONFLICT (session_id) DO NOTHING",
                [
                    (sid, parents[-1] if parents else None, Jsonb(parents), Jsonb(meta), SESSION_STATE_OPEN, now, now)
                    for sid, parents, meta, now in sessions
                ],
            )

    def insert_rewards(self, rewards: list[RewardRow]) -> list[bool]:
        inserted = []
        with self._writing() as db, db.transaction():
            for reward in rewards:
                cursor = db.execute(
                    "INSERT INTO rewards (reward_id, session_id, body, create_time) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (reward_id) DO NOTHING",
                    (reward.reward_id, reward.session_id, reward.body, reward.create_time),
                )
                inserted.append(cursor.rowcount == 1)
        return inserted

    def close_sessions(self, closes: list[SessionClose], time: float) -> list[SessionRow]:
        closed = []
        with self._writing() as db, db.transaction():
            self._insert_sessions(db, [(close.session_id, [], {}, time) for close in closes])
            for close in closes:
                # Locked for update, so a concurrent store process cannot close it too.
                session = session_from_values(db.execute(
                    f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = %s FOR UPDATE", (close.session_id,)
                ).fetchone())  # fmt: skip
                metadata = session.metadata | close.metadata
                if session.state != SESSION_STATE_CLOSED:
                    # The counter row stays locked until commit: closes commit in number order.
                    (seq,) = db.execute(
                        "UPDATE store_counters SET value = value + 1 WHERE name = 'close_seq' RETURNING value"
                    ).fetchone()
                    values = db.execute(
                        "UPDATE sessions SET state = %s, outcome = %s, error_message = %s, close_time = %s,"
                        " update_time = %s, close_seq = %s, metadata = %s"
                        f" WHERE session_id = %s RETURNING {SESSION_COLUMNS}",
                        (SESSION_STATE_CLOSED, close.outcome, close.error_message, time, time, seq,
                         Jsonb(metadata), close.session_id),
                    ).fetchone()  # fmt: skip
                else:
                    values = db.execute(
                        f"UPDATE sessions SET metadata = %s WHERE session_id = %s RETURNING {SESSION_COLUMNS}",
                        (Jsonb(metadata), close.session_id),
                    ).fetchone()
                closed.append(session_from_values(values))
        return closed

    def update_session_metadata(self, updates: list[MetadataUpdate]) -> set[str]:
        changed = set()
        with self._writing() as db, db.transaction():
            for update in updates:
                (current,) = db.execute(
                    "SELECT metadata FROM sessions WHERE session_id = %s FOR UPDATE", (update.session_id,)
                ).fetchone()
                metadata = update.apply(current)
                if metadata != current:
                    db.execute("UPDATE sessions SET metadata = %s WHERE session_id = %s", (Jsonb(metadata), update.session_id))
                    changed.add(update.session_id)
        return changed

    def delete_sessions(self, session_ids: list[str], updated_before: float | None) -> tuple[int, int]:
        with self._writing() as db, db.transaction():
            doomed = [
                r[0]
                for r in db.execute(
                    "WITH RECURSIVE tree(session_id) AS ("
                    " SELECT session_id FROM sessions WHERE session_id = ANY(%s) OR update_time < %s"
                    " UNION SELECT s.session_id FROM sessions s JOIN tree t ON s.parent_session_id = t.session_id)"
                    " SELECT session_id FROM tree",
                    (session_ids, updated_before if updated_before is not None else float("-inf")),
                )
            ]
            calls = db.execute("DELETE FROM calls WHERE session_id = ANY(%s)", (doomed,)).rowcount
            db.execute("DELETE FROM rewards WHERE session_id = ANY(%s)", (doomed,))
            sessions = db.execute("DELETE FROM sessions WHERE session_id = ANY(%s)", (doomed,)).rowcount
        return sessions, calls

    # Reads.
    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        db = self._reader()
        # REPEATABLE READ takes one snapshot at the first read and keeps it; read only,
        # it never fails with a serialization error, and no write waits for it.
        with db.transaction():
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def get_call_rows(self, call_ids: Iterable[str]) -> dict[str, CallRow]:
        rows = self._reader().execute(f"SELECT {CALL_COLUMNS} FROM calls WHERE call_id = ANY(%s)", (list(call_ids),))
        return {row.call_id: row for row in map(call_from_values, rows)}

    def last_trajectory_calls(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], CallRow]:
        wanted = set(keys)
        rows = self._reader().execute(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE seq IN (SELECT max(seq) FROM calls"
            " WHERE session_id = ANY(%s) GROUP BY session_id, trajectory_name)",
            (sorted({session_id for session_id, _ in wanted}),),
        )
        found = {}
        for row in map(call_from_values, rows):
            if (row.session_id, row.trajectory_name) in wanted:
                found[row.session_id, row.trajectory_name] = row
        return found

    def list_call_rows(self, session_id: str, after_seq: int, limit: int) -> list[CallRow]:
        rows = self._reader().execute(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s",
            (session_id, after_seq, limit),
        )
        return [call_from_values(v) for v in rows]

    def call_rows_after(self, seq: int, limit: int) -> list[CallRow]:
        rows = self._reader().execute(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE seq > %s ORDER BY seq LIMIT %s", (seq, limit)
        )
        return [call_from_values(v) for v in rows]

    def list_reward_rows(self, session_id: str, after_key: int, limit: int) -> list[RewardRow]:
        rows = self._reader().execute(
            f"SELECT {REWARD_COLUMNS} FROM rewards WHERE session_id = %s AND key > %s ORDER BY key LIMIT %s",
            (session_id, after_key, limit),
        )
        return [reward_from_values(v) for v in rows]

    def session_call_rows(self, session_ids: Iterable[str]) -> list[CallRow]:
        rows = self._reader().execute(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE session_id = ANY(%s) ORDER BY seq", (list(session_ids),)
        )
        return [call_from_values(v) for v in rows]

    def session_reward_rows(self, session_ids: Iterable[str]) -> list[RewardRow]:
        rows = self._reader().execute(
            f"SELECT {REWARD_COLUMNS} FROM rewards WHERE session_id = ANY(%s) ORDER BY key", (list(session_ids),)
        )
        return [reward_from_values(v) for v in rows]

    def get_sessions(self, session_ids: Iterable[str]) -> dict[str, SessionRow]:
        rows = self._reader().execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ANY(%s)", (list(session_ids),)
        )
        return {session.session_id: session for session in map(session_from_values, rows)}

    def sessions_closed_after(self, close_seq: int, limit: int) -> list[SessionRow]:
        rows = self._reader().execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE close_seq > %s ORDER BY close_seq LIMIT %s",
            (close_seq, limit),
        )
        return [session_from_values(v) for v in rows]

    def get_session(self, session_id: str) -> SessionRow | None:
        values = self._reader().execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = %s", (session_id,)
        ).fetchone()
        return session_from_values(values) if values else None

    def list_sessions(self, query: SessionQuery, position: int, limit: int) -> list[SessionRow]:
        where: list[str] = ["TRUE"]
        params: list[object] = []
        if position:
            where.append("key < %s" if query.newest_first else "key > %s")
            params.append(position)
        if query.state is not None:
            where.append("state = %s")
            params.append(query.state)
        if query.parent_session_id is not None:
            where.append("parent_session_id = %s")
            params.append(query.parent_session_id)
        if query.outcome is not None:
            where.append("outcome = %s")
            params.append(query.outcome)
        if query.session_id_prefix:
            where.append("starts_with(session_id, %s)")
            params.append(query.session_id_prefix)
        if query.metadata:
            where.append("metadata @> %s")
            params.append(Jsonb(dict(query.metadata)))
        order = "DESC" if query.newest_first else ""
        rows = self._reader().execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE {' AND '.join(where)} ORDER BY key {order} LIMIT %s",
            (*params, limit),
        )
        return [session_from_values(v) for v in rows]

    def latest_call_seq(self) -> int:
        return int(self._reader().execute("SELECT coalesce(max(seq), 0) FROM calls").fetchone()[0])

    def stats(self) -> BackendStats:
        sessions, calls, rewards, tokens, size = self._reader().execute(
            "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM calls), (SELECT count(*) FROM rewards),"
            " (SELECT coalesce(sum(logical_tokens), 0) FROM calls),"
            " pg_total_relation_size('calls') + pg_total_relation_size('sessions') + pg_total_relation_size('rewards')"
        ).fetchone()
        return BackendStats(sessions, calls, rewards, int(tokens), size)

    def close(self) -> None:
        with self._readers_lock:
            for connection in self._readers:
                connection.close()
            self._readers.clear()
        self._writer.close()

"""`postgresql://USER@HOST:PORT/DB`: the store past one machine, on a real PostgreSQL.

Commit order is what watch cursors rely on. Every call write first bumps one
counter row and takes its sequence numbers from it; the row lock it holds until
commit means a later writer can only number its calls after the earlier one has
committed, so several store processes can share one database without a watcher
ever seeing call N+1 before call N.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterable, Iterator

import psycopg
import structlog
from psycopg.types.json import Jsonb

from parity.services.runtime.errors import InvalidArgument, Unavailable
from parity.services.store.backends.base import StoreBackend
from parity.services.store.backends.reader_pool import ReaderPool
from parity.services.store.backends.sql_schema import (
    CALL_COLUMNS,
    POSTGRES,
    POSTGRES_MIGRATIONS,
    REWARD_COLUMNS,
    SESSION_COLUMNS,
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

SCHEMA_VERSION = len(POSTGRES_MIGRATIONS)
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
        self.store_id = one_row(
            self._writer.execute("SELECT value FROM store_meta WHERE key = 'store_id'").fetchone()
        )[0]
        # Autocommit: every read sees everything committed before it started.
        self._readers = ReaderPool(
            lambda: self._connect(READER_APPLICATION_NAME), lambda c: c.closed
        )

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

    def _migrate(self) -> None:
        db = self._writer
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            db.execute(migrations_table(POSTGRES))
            current = one_row(
                db.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
            )[0]
            if current > SCHEMA_VERSION:
                raise InvalidArgument(
                    f"database has schema version {current}, newer than this Parity's {SCHEMA_VERSION}"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in POSTGRES_MIGRATIONS[version - 1]:
                    db.execute(statement)
                if version == 1:
                    db.execute(
                        "INSERT INTO store_meta VALUES ('store_id', %s)", (uuid.uuid4().hex,)
                    )
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
            raise Unavailable(
                f"PostgreSQL is out of disk space ({error}); writes resume once space is freed"
            ) from None
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
            (last,) = one_row(
                db.execute(
                    "UPDATE store_counters SET value = value + %s WHERE name = 'call_seq' RETURNING value",
                    (len(batch.calls),),
                ).fetchone()
            )
            for offset, row in enumerate(batch.calls):
                row.seq = last - len(batch.calls) + 1 + offset
            with db.cursor() as cursor:
                write_touched_sessions(cursor.executemany, POSTGRES, batch.sessions, Jsonb)
                with cursor.copy(f"COPY calls ({CALL_COLUMNS}) FROM STDIN") as copy:
                    for row in batch.calls:
                        copy.write_row(call_values(row))

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
            with db.cursor() as cursor:
                new: list[NewSession] = [(close.session_id, [], {}, time) for close in closes]
                create_missing_sessions(cursor.executemany, POSTGRES, new, Jsonb)
            for close in closes:
                # Locked for update, so a concurrent store process cannot close it too.
                session = session_from_values(one_row(db.execute(
                    f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = %s FOR UPDATE", (close.session_id,)
                ).fetchone()))  # fmt: skip
                metadata = session.metadata | close.metadata
                if session.state != SESSION_STATE_CLOSED:
                    # The counter row stays locked until commit: closes commit in number order.
                    (seq,) = one_row(
                        db.execute(
                            "UPDATE store_counters SET value = value + 1 WHERE name = 'close_seq' RETURNING value"
                        ).fetchone()
                    )
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
                closed.append(session_from_values(one_row(values)))
        return closed

    def update_session_metadata(self, updates: list[MetadataUpdate]) -> set[str]:
        changed = set()
        with self._writing() as db, db.transaction():
            for update in updates:
                (current,) = one_row(
                    db.execute(
                        "SELECT metadata FROM sessions WHERE session_id = %s FOR UPDATE",
                        (update.session_id,),
                    ).fetchone()
                )
                metadata = update.apply(current)
                if metadata != current:
                    db.execute(
                        "UPDATE sessions SET metadata = %s WHERE session_id = %s",
                        (Jsonb(metadata), update.session_id),
                    )
                    changed.add(update.session_id)
        return changed

    def delete_sessions(
        self, session_ids: list[str], updated_before: float | None, end_user_id: str = ""
    ) -> DeletedCounts:
        with self._writing() as db, db.transaction():
            named = ("session_id = ANY(%s)", [session_ids])
            trees, params = session_trees(POSTGRES, named, updated_before, end_user_id)
            doomed = [r[0] for r in db.execute(f"{trees} SELECT session_id FROM tree", params)]
            return delete_session_rows(
                lambda sql, values: db.execute(sql, values).rowcount,
                ("session_id = ANY(%s)", [doomed]),
            )

    # Reads.
    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        db = self._readers.connection()
        # REPEATABLE READ takes one snapshot at the first read and keeps it; read only,
        # it never fails with a serialization error, and no write waits for it.
        with db.transaction():
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def get_call_rows(self, call_ids: Iterable[str]) -> dict[str, CallRow]:
        rows = self._readers.connection().execute(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE call_id = ANY(%s)", (list(call_ids),)
        )
        return {row.call_id: row for row in map(call_from_values, rows)}

    def last_trajectory_calls(
        self, keys: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], CallRow]:
        wanted = set(keys)
        rows = self._readers.connection().execute(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE seq IN (SELECT max(seq) FROM calls"
            " WHERE session_id = ANY(%s) GROUP BY session_id, trajectory_name)",
            (sorted({session_id for session_id, _ in wanted}),),
        )
        return calls_by_trajectory(rows, wanted)

    def list_call_rows(self, session_id: str, after_seq: int, limit: int) -> list[CallRow]:
        rows = self._readers.connection().execute(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s",
            (session_id, after_seq, limit),
        )
        return [call_from_values(v) for v in rows]

    def call_rows_after(self, seq: int, limit: int) -> list[CallRow]:
        rows = self._readers.connection().execute(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE seq > %s ORDER BY seq LIMIT %s", (seq, limit)
        )
        return [call_from_values(v) for v in rows]

    def get_reward_rows(self, reward_ids: Iterable[str]) -> dict[str, RewardRow]:
        rows = self._readers.connection().execute(
            f"SELECT {REWARD_COLUMNS} FROM rewards WHERE reward_id = ANY(%s)", (list(reward_ids),)
        )
        return {row.reward_id: row for row in map(reward_from_values, rows)}

    def list_reward_rows(self, session_id: str, after_key: int, limit: int) -> list[RewardRow]:
        rows = self._readers.connection().execute(
            f"SELECT {REWARD_COLUMNS} FROM rewards WHERE session_id = %s AND key > %s ORDER BY key LIMIT %s",
            (session_id, after_key, limit),
        )
        return [reward_from_values(v) for v in rows]

    def session_call_rows(self, session_ids: Iterable[str]) -> list[CallRow]:
        rows = self._readers.connection().execute(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE session_id = ANY(%s) ORDER BY seq",
            (list(session_ids),),
        )
        return [call_from_values(v) for v in rows]

    def session_reward_rows(self, session_ids: Iterable[str]) -> list[RewardRow]:
        rows = self._readers.connection().execute(
            f"SELECT {REWARD_COLUMNS} FROM rewards WHERE session_id = ANY(%s) ORDER BY key",
            (list(session_ids),),
        )
        return [reward_from_values(v) for v in rows]

    def get_sessions(self, session_ids: Iterable[str]) -> dict[str, SessionRow]:
        rows = self._readers.connection().execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ANY(%s)",
            (list(session_ids),),
        )
        return {session.session_id: session for session in map(session_from_values, rows)}

    def sessions_closed_after(self, close_seq: int, limit: int) -> list[SessionRow]:
        rows = self._readers.connection().execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE close_seq > %s ORDER BY close_seq LIMIT %s",
            (close_seq, limit),
        )
        return [session_from_values(v) for v in rows]

    def get_session(self, session_id: str) -> SessionRow | None:
        values = (
            self._readers.connection()
            .execute(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = %s", (session_id,))
            .fetchone()
        )
        return session_from_values(values) if values else None

    def list_sessions(self, query: SessionQuery, position: int, limit: int) -> list[SessionRow]:
        filters: list[Condition] = []
        if query.session_id_prefix:
            filters.append(("starts_with(session_id, %s)", [query.session_id_prefix]))
        if query.metadata:
            filters.append(("metadata @> %s", [Jsonb(dict(query.metadata))]))
        sql, params = sessions_page_query(POSTGRES, query, position, limit, filters)
        return [session_from_values(v) for v in self._readers.connection().execute(sql, params)]

    def latest_call_seq(self) -> int:
        return int(
            one_row(
                self._readers.connection()
                .execute("SELECT coalesce(max(seq), 0) FROM calls")
                .fetchone()
            )[0]
        )

    def stats(self) -> BackendStats:
        sessions, calls, rewards, tokens, size = one_row(
            self._readers.connection()
            .execute(
                "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM calls), (SELECT count(*) FROM rewards),"
                " (SELECT coalesce(sum(logical_tokens), 0) FROM calls),"
                " pg_total_relation_size('calls') + pg_total_relation_size('sessions') + pg_total_relation_size('rewards')"
                " + pg_total_relation_size('session_tags')"
            )
            .fetchone()
        )
        return BackendStats(sessions, calls, rewards, int(tokens), size)

    def close(self) -> None:
        self._readers.close()
        self._writer.close()

"""A database made by an earlier schema opens with its data: closes numbered in close order
(version 2), sessions with no end user or tags until their calls bring them (version 3)."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import psycopg

from parity.services.store.backends.postgres import PostgresBackend
from parity.services.store.backends.sql_schema import (
    POSTGRES,
    POSTGRES_MIGRATIONS,
    SQLITE,
    SQLITE_MIGRATIONS,
    migrations_table,
)
from parity.services.store.backends.sqlite import SqliteBackend
from parity.services.store.records import SessionQuery
from parity.services.store.token_store import TokenStore
from tests.call_factory import make_call


def test_sqlite_v1_database_gets_close_numbers_in_close_order(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    db = apsw.Connection(str(path))
    db.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    with db:
        for statement in SQLITE_MIGRATIONS[0]:
            db.execute(statement)
        db.execute("INSERT INTO store_meta VALUES ('store_id', 'old')")
        db.execute("INSERT INTO schema_migrations VALUES (1, 0)")
        for key, session_id, close_time in [
            (1, "first-created", 30.0),
            (2, "open", None),
            (3, "closed-first", 10.0),
        ]:
            state = 1 if close_time is None else 2
            db.execute(
                "INSERT INTO sessions (key, session_id, parent_session_id, parent_session_ids, metadata, state,"
                " outcome, error_message, call_count, create_time, update_time, close_time)"
                " VALUES (?, ?, NULL, '[]', ?, ?, 1, '', 0, 0, 0, ?)",
                (key, session_id, json.dumps({"k": session_id}), state, close_time),
            )
    db.close()

    backend = SqliteBackend(path)
    try:
        closed = backend.sessions_closed_after(0, 10)
        assert [(s.session_id, s.close_seq) for s in closed] == [
            ("closed-first", 1),
            ("first-created", 2),
        ]
        still_open = backend.get_session("open")
        assert still_open is not None and still_open.close_seq == 0 and backend.store_id == "old"
    finally:
        backend.close()


# Sessions as version 2 kept them: (session_id, parent_session_id, parent_session_ids, update_time).
V2_SESSIONS = [("old-root", None, "[]", 5.0), ("old-kid", "old-root", '["old-root"]', 6.0)]
V2_INSERT = (
    "INSERT INTO sessions (session_id, parent_session_id, parent_session_ids, metadata, state, outcome,"
    " error_message, call_count, create_time, update_time) VALUES ({0}, {0}, {0}, '{{}}', 1, 0, '', 0, 0, {0})"
)


async def _check_v2_database_gets_end_users_and_tags(store: TokenStore) -> None:
    """Sessions from before have no end user and no tags; new ones are attributed and
    listed by them, and the old ones still delete with their descendants."""
    old = await store.get_session("old-kid")
    assert (old.end_user_id, old.tags, old.parent_session_ids) == ("", [], ["old-root"])
    await store.write_calls([make_call("c", "new", [1], [[2]])])
    attributed = make_call("d", "old-kid", [1], [[2]])
    attributed.end_user_id, attributed.tags[:] = "user-1", ["prod"]
    await store.write_calls([attributed])
    assert (await store.get_session("old-kid")).tags == ["prod"]
    by_tag, _ = await store.list_sessions(SessionQuery(tags=("prod",)), 10, "")
    by_user, _ = await store.list_sessions(SessionQuery(end_user_id="user-1"), 10, "")
    assert [s.session_id for s in by_tag] == [s.session_id for s in by_user] == ["old-kid"]
    assert await store.delete_sessions(["old-root"], None) == (2, 1, 0)
    assert [s.session_id for s in (await store.list_sessions(SessionQuery(), 10, ""))[0]] == ["new"]


async def test_sqlite_v2_database_opens_with_end_users_and_tags(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    db = apsw.Connection(str(path))
    db.execute(migrations_table(SQLITE))
    with db:
        for version, statements in enumerate(SQLITE_MIGRATIONS[:2], start=1):
            for statement in statements:
                db.execute(statement)
            db.execute("INSERT INTO schema_migrations VALUES (?, 0)", (version,))
        db.execute("INSERT INTO store_meta VALUES ('store_id', 'old')")
        db.executemany(V2_INSERT.format("?"), V2_SESSIONS)
    db.close()

    store = TokenStore(SqliteBackend(path))
    await store.start()
    try:
        await _check_v2_database_gets_end_users_and_tags(store)
    finally:
        await store.stop()
    db = apsw.Connection(str(path))
    columns = {row[1] for row in db.execute("PRAGMA table_info(sessions)")}
    assert {"end_user_id", "tags"} <= columns
    assert db.execute("SELECT max(version) FROM schema_migrations").fetchone() == (3,)
    db.close()


async def test_postgres_v2_database_opens_with_end_users_and_tags(fresh_postgres_url: str) -> None:
    with psycopg.connect(fresh_postgres_url, autocommit=True) as db, db.transaction():
        db.execute(migrations_table(POSTGRES))
        for version, statements in enumerate(POSTGRES_MIGRATIONS[:2], start=1):
            for statement in statements:
                db.execute(statement)
            db.execute("INSERT INTO schema_migrations VALUES (%s, 0)", (version,))
        db.execute("INSERT INTO store_meta VALUES ('store_id', 'old')")
        db.cursor().executemany(V2_INSERT.format("%s"), V2_SESSIONS)

    store = TokenStore(PostgresBackend(fresh_postgres_url))
    await store.start()
    try:
        await _check_v2_database_gets_end_users_and_tags(store)
    finally:
        await store.stop()
    with psycopg.connect(fresh_postgres_url) as db:
        columns = {row[0] for row in db.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'sessions'"
        )}  # fmt: skip
        assert {"end_user_id", "tags"} <= columns
        assert db.execute("SELECT max(version) FROM schema_migrations").fetchone() == (3,)

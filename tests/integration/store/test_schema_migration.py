"""A database made by the previous schema opens with its data, its closes numbered in close order."""

from __future__ import annotations

import json
from pathlib import Path

import apsw

from parity.services.store.backends.sql_schema import SQLITE_MIGRATIONS
from parity.services.store.backends.sqlite import SqliteBackend


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
        assert backend.get_session("open").close_seq == 0 and backend.store_id == "old"
    finally:
        backend.close()

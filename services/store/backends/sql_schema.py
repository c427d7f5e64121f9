"""What the SQL backends (SQLite and PostgreSQL) store: the tables, written once and
rendered in each dialect's column types, and rows <-> column values.

A released migration's statements never change: SQLite keeps each CREATE TABLE's
text as the table's schema, and a database made by any version must keep opening.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from parity.core.splice_delta import Splice
from parity.services.store.records import CallRow, RewardRow, SessionRow


@dataclass(frozen=True, slots=True)
class SqlDialect:
    """What SQLite and PostgreSQL spell differently in the statements both backends run."""

    # A query parameter's placeholder.
    mark: str
    # A primary key the database numbers, never reusing a number after a delete.
    row_key: str
    # calls.seq: the call's position in commit order.
    call_seq: str
    small_int: str
    big_int: str
    double: str
    json: str
    blob: str
    # A condition on a sessions row: its metadata holds no key.
    empty_metadata: str
    # The rows of a JSON array of strings, as column `value`; format with the array.
    json_array_values: str
    # Ends a CREATE TABLE whose primary key is the whole row.
    key_only_table: str


SQLITE = SqlDialect(
    mark="?",
    row_key="INTEGER PRIMARY KEY AUTOINCREMENT",
    # AUTOINCREMENT: a sequence number is never reused after a delete, so a
    # watch cursor can never point at a different call than it did.
    call_seq="INTEGER PRIMARY KEY AUTOINCREMENT",
    small_int="INTEGER",
    big_int="INTEGER",
    double="REAL",
    json="TEXT",
    blob="BLOB",
    empty_metadata="json(sessions.metadata) = '{}'",
    json_array_values="json_each({}) AS items",
    key_only_table=" WITHOUT ROWID",
)
POSTGRES = SqlDialect(
    mark="%s",
    row_key="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    # Numbered from the call_seq counter row (see postgres.py).
    call_seq="BIGINT PRIMARY KEY",
    small_int="SMALLINT",
    big_int="BIGINT",
    double="DOUBLE PRECISION",
    json="JSONB",
    blob="BYTEA",
    empty_metadata="sessions.metadata = '{}'",
    json_array_values="jsonb_array_elements_text({}) AS items(value)",
    key_only_table="",
)


def migrations_table(dialect: SqlDialect) -> str:
    return (
        "CREATE TABLE IF NOT EXISTS schema_migrations"
        f" (version INTEGER PRIMARY KEY, applied_at {dialect.double} NOT NULL)"
    )


def _data_tables(dialect: SqlDialect) -> list[str]:
    """Schema version 1's sessions, calls and rewards, with their indexes."""
    d = dialect
    return [
        _table("sessions", [
            f"key {d.row_key}",
            "session_id TEXT NOT NULL UNIQUE",
            "parent_session_id TEXT",
            f"parent_session_ids {d.json} NOT NULL",
            f"metadata {d.json} NOT NULL",
            f"state {d.small_int} NOT NULL",
            f"outcome {d.small_int} NOT NULL",
            "error_message TEXT NOT NULL",
            f"call_count {d.big_int} NOT NULL",
            f"create_time {d.double} NOT NULL",
            f"update_time {d.double} NOT NULL",
            f"close_time {d.double}",
        ]),
        "CREATE INDEX sessions_by_parent ON sessions (parent_session_id, key)",
        "CREATE INDEX sessions_by_state ON sessions (state, key)",
        "CREATE INDEX sessions_by_update_time ON sessions (update_time)",
        _table("calls", [
            f"seq {d.call_seq}",
            "call_id TEXT NOT NULL UNIQUE",
            "session_id TEXT NOT NULL",
            "trajectory_name TEXT NOT NULL",
            "ref_call_id TEXT",
            "ref_choice INTEGER NOT NULL",
            "ref_depth INTEGER NOT NULL",
            "prompt_prefix INTEGER NOT NULL",
            "prompt_suffix INTEGER NOT NULL",
            f"prompt_middle {d.blob} NOT NULL",
            "request_prefix INTEGER NOT NULL",
            "request_suffix INTEGER NOT NULL",
            f"request_middle {d.blob} NOT NULL",
            f"body {d.blob} NOT NULL",
            "logical_tokens INTEGER NOT NULL",
            f"create_time {d.double} NOT NULL",
        ]),
        "CREATE INDEX calls_by_session ON calls (session_id, seq)",
        _table("rewards", [
            f"key {d.row_key}",
            "reward_id TEXT NOT NULL UNIQUE",
            "session_id TEXT NOT NULL",
            f"body {d.blob} NOT NULL",
            f"create_time {d.double} NOT NULL",
        ]),
        "CREATE INDEX rewards_by_session ON rewards (session_id, key)",
    ]  # fmt: skip


def _table(name: str, columns: list[str]) -> str:
    # Laid out as first released, indentation included (see the module's docstring).
    return f"CREATE TABLE {name} (\n" + ",\n".join(f"            {c}" for c in columns) + ")"


def _close_seq_column(dialect: SqlDialect) -> list[str]:
    return [
        f"ALTER TABLE sessions ADD COLUMN close_seq {dialect.big_int}",
        # Sessions closed before this version are numbered in the order they closed.
        "UPDATE sessions SET close_seq = numbered.n FROM (SELECT key, row_number() OVER"
        " (ORDER BY close_time, key) AS n FROM sessions WHERE close_time IS NOT NULL) AS numbered"
        " WHERE sessions.key = numbered.key",
        "CREATE UNIQUE INDEX sessions_by_close_seq ON sessions (close_seq)",
    ]


def _counters_table(dialect: SqlDialect) -> str:
    return f"CREATE TABLE store_counters (name TEXT PRIMARY KEY, value {dialect.big_int} NOT NULL)"


def _attribution(dialect: SqlDialect) -> list[str]:
    """Who each session served, and its tags; session_tags indexes the tags, one row per
    (tag, session), written when a session's tags are set and deleted with it."""
    return [
        "ALTER TABLE sessions ADD COLUMN end_user_id TEXT NOT NULL DEFAULT ''",
        f"ALTER TABLE sessions ADD COLUMN tags {dialect.json} NOT NULL DEFAULT '[]'",
        "CREATE INDEX sessions_by_end_user ON sessions (end_user_id, key)",
        "CREATE TABLE session_tags (tag TEXT NOT NULL, session_id TEXT NOT NULL,"
        f" PRIMARY KEY (tag, session_id)){dialect.key_only_table}",
        "CREATE INDEX session_tags_by_session ON session_tags (session_id)",
    ]


_STORE_META_TABLE = "CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
_COUNT_CLOSES = (
    "INSERT INTO store_counters SELECT 'close_seq', coalesce(max(close_seq), 0) FROM sessions"
)

# Each entry migrates the schema from version N-1 to N, in one transaction.
SQLITE_MIGRATIONS: list[list[str]] = [
    [_STORE_META_TABLE, *_data_tables(SQLITE)],
    # Close order, for the watch of closes. A counter rather than max(close_seq) + 1,
    # so a number is never reused after the session holding it is deleted.
    [*_close_seq_column(SQLITE), _counters_table(SQLITE), _COUNT_CLOSES],
    _attribution(SQLITE),
]
POSTGRES_MIGRATIONS: list[list[str]] = [
    [
        _STORE_META_TABLE,
        _counters_table(POSTGRES),
        "INSERT INTO store_counters VALUES ('call_seq', 0)",
        *_data_tables(POSTGRES),
    ],
    # Close order, numbered from a counter row like calls, so several store
    # processes close sessions in one order and a number is never reused.
    [*_close_seq_column(POSTGRES), _COUNT_CLOSES],
    _attribution(POSTGRES),
]

CALL_COLUMNS = (
    "seq, call_id, session_id, trajectory_name, ref_call_id, ref_choice, ref_depth, "
    "prompt_prefix, prompt_suffix, prompt_middle, request_prefix, request_suffix, request_middle, "
    "body, logical_tokens, create_time"
)
SESSION_COLUMNS = (
    "key, session_id, parent_session_ids, metadata, state, outcome, error_message, "
    "call_count, create_time, update_time, close_time, close_seq, end_user_id, tags"
)
REWARD_COLUMNS = "key, reward_id, session_id, body, create_time"


def call_values(row: CallRow) -> tuple[Any, ...]:
    return (
        row.seq, row.call_id, row.session_id, row.trajectory_name, row.ref_call_id, row.ref_choice,
        row.ref_depth, row.prompt.prefix_len, row.prompt.suffix_len, row.prompt.middle,
        row.request.prefix_len, row.request.suffix_len, row.request.middle, row.body,
        row.logical_tokens, row.create_time,
    )  # fmt: skip


def call_from_values(values: tuple[Any, ...]) -> CallRow:
    (seq, call_id, session_id, trajectory_name, ref_call_id, ref_choice, ref_depth, prompt_prefix,
     prompt_suffix, prompt_middle, request_prefix, request_suffix, request_middle, body,
     logical_tokens, create_time) = values  # fmt: skip
    return CallRow(
        call_id=call_id,
        session_id=session_id,
        trajectory_name=trajectory_name,
        body=bytes(body),
        prompt=Splice(prompt_prefix, prompt_suffix, bytes(prompt_middle)),
        request=Splice(request_prefix, request_suffix, bytes(request_middle)),
        ref_call_id=ref_call_id,
        ref_choice=ref_choice,
        ref_depth=ref_depth,
        logical_tokens=logical_tokens,
        create_time=create_time,
        seq=seq,
    )


def calls_by_trajectory(
    values: Iterable[tuple[Any, ...]], wanted: set[tuple[str, str]]
) -> dict[tuple[str, str], CallRow]:
    """The calls among `values` of the `wanted` (session_id, trajectory_name)s, by those."""
    found = {}
    for row in map(call_from_values, values):
        if (row.session_id, row.trajectory_name) in wanted:
            found[row.session_id, row.trajectory_name] = row
    return found


def session_from_values(values: tuple[Any, ...]) -> SessionRow:
    (key, session_id, parents, metadata, state, outcome, error_message, call_count, create_time,
     update_time, close_time, close_seq, end_user_id, tags) = values  # fmt: skip
    return SessionRow(
        session_id=session_id,
        parent_session_ids=_json(parents),
        metadata=_json(metadata),
        end_user_id=end_user_id,
        tags=_json(tags),
        state=state,
        outcome=outcome,
        error_message=error_message,
        call_count=call_count,
        create_time=create_time,
        update_time=update_time,
        close_time=close_time,
        key=key,
        close_seq=close_seq or 0,
    )


def reward_from_values(values: tuple[Any, ...]) -> RewardRow:
    key, reward_id, session_id, body, create_time = values
    return RewardRow(reward_id, session_id, bytes(body), create_time, key)


def _json(value: Any) -> Any:
    # PostgreSQL's jsonb arrives decoded; SQLite's text does not.
    return json.loads(value) if isinstance(value, str) else value

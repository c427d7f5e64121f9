"""The statements on sessions both SQL backends run alike: creating and updating the
sessions a write touches, with the ancestors they name and the tags they carry, paging
through them, and deleting them with everything recorded under them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from parity.services.store.backends.sql_schema import SESSION_COLUMNS, SqlDialect
from parity.services.store.records import (
    SESSION_STATE_OPEN,
    DeletedCounts,
    SessionQuery,
    SessionTouch,
)

# (session_id, parent_session_ids, metadata, time) of a session a write creates if missing.
NewSession = tuple[str, list[str], dict[str, str], float]
# A statement and the rows of values it runs once each for (the driver's executemany).
ExecuteMany = Callable[[str, list[tuple[Any, ...]]], object]
EncodeJson = Callable[[Any], Any]
# A statement and its parameters, run once; returns how many rows it changed.
RunCounted = Callable[[str, Sequence[object]], int]
# A condition on a sessions row, with the parameters its placeholders take.
Condition = tuple[str, Sequence[object]]
Row = TypeVar("Row")


def write_touched_sessions(
    executemany: ExecuteMany,
    dialect: SqlDialect,
    touches: list[SessionTouch],
    encode_json: EncodeJson,
) -> None:
    """Creates each session a batch of calls touches, with the ancestors it names, and
    adds the batch's calls to its count."""
    m = dialect.mark
    # A session first created as an ancestor or by a close takes its parents, metadata,
    # end user and tags from its own calls; once set, each is never rewritten.
    executemany(
        f"{_insert_open_sessions(dialect, call_count=m, attributed=True)}"
        " ON CONFLICT (session_id) DO UPDATE"
        " SET call_count = sessions.call_count + excluded.call_count,"
        " update_time = excluded.update_time,"
        " parent_session_id = coalesce(sessions.parent_session_id, excluded.parent_session_id),"
        " parent_session_ids = CASE WHEN sessions.parent_session_id IS NULL"
        " THEN excluded.parent_session_ids ELSE sessions.parent_session_ids END,"
        f" metadata = CASE WHEN {dialect.empty_metadata}"
        " THEN excluded.metadata ELSE sessions.metadata END,"
        " end_user_id = CASE WHEN sessions.end_user_id = ''"
        " THEN excluded.end_user_id ELSE sessions.end_user_id END,"
        " tags = CASE WHEN sessions.tags = '[]' THEN excluded.tags ELSE sessions.tags END",
        [
            (t.session_id, t.parent_session_ids[-1] if t.parent_session_ids else None,
             encode_json(t.parent_session_ids), encode_json(t.metadata), SESSION_STATE_OPEN,
             t.added_calls, t.time, t.time, t.end_user_id, encode_json(t.tags))
            for t in touches
        ],
    )  # fmt: skip
    tagged = [(touch.session_id,) for touch in touches if touch.tags]
    if tagged:
        # The index rows of the tags the session holds now: this batch's, or the ones it
        # was given before (whose rows are there already).
        executemany(
            "INSERT INTO session_tags (tag, session_id) SELECT items.value, sessions.session_id"
            f" FROM sessions, {dialect.json_array_values.format('sessions.tags')}"
            f" WHERE sessions.session_id = {m} ON CONFLICT DO NOTHING",
            tagged,
        )
    # After the sessions' own rows, so a session's metadata wins over its
    # creation as some other session's ancestor in the same batch.
    ancestors: list[NewSession] = [
        (ancestor, touch.parent_session_ids[:depth], {}, touch.time)
        for touch in touches
        for depth, ancestor in enumerate(touch.parent_session_ids)
    ]
    if ancestors:
        create_missing_sessions(executemany, dialect, ancestors, encode_json)


def create_missing_sessions(
    executemany: ExecuteMany,
    dialect: SqlDialect,
    sessions: Iterable[NewSession],
    encode_json: EncodeJson,
) -> None:
    """Creates the sessions that do not exist yet, with no calls; the others stay as they are."""
    executemany(
        f"{_insert_open_sessions(dialect, call_count='0')} ON CONFLICT (session_id) DO NOTHING",
        [
            (sid, parents[-1] if parents else None, encode_json(parents), encode_json(metadata),
             SESSION_STATE_OPEN, time, time)
            for sid, parents, metadata, time in sessions
        ],
    )  # fmt: skip


def _insert_open_sessions(dialect: SqlDialect, call_count: str, attributed: bool = False) -> str:
    """With `attributed`, the end user and tags are two more parameters; else left empty."""
    m = dialect.mark
    columns, values = (", end_user_id, tags", f", {m}, {m}") if attributed else ("", "")
    return (
        "INSERT INTO sessions (session_id, parent_session_id, parent_session_ids, metadata, state,"
        f" outcome, error_message, call_count, create_time, update_time{columns})"
        f" VALUES ({m}, {m}, {m}, {m}, {m}, 0, '', {call_count}, {m}, {m}{values})"
    )


def sessions_page_query(
    dialect: SqlDialect,
    query: SessionQuery,
    position: int,
    limit: int,
    dialect_filters: list[Condition],
) -> tuple[str, list[object]]:
    """The SELECT of ListSessions' page and its parameters. `dialect_filters` are the
    query's conditions each dialect writes its own way (id prefix, metadata)."""
    m = dialect.mark
    conditions: list[Condition] = []
    if position:
        conditions.append((f"key < {m}" if query.newest_first else f"key > {m}", [position]))
    if query.state is not None:
        conditions.append((f"state = {m}", [query.state]))
    if query.parent_session_id is not None:
        conditions.append((f"parent_session_id = {m}", [query.parent_session_id]))
    if query.outcome is not None:
        conditions.append((f"outcome = {m}", [query.outcome]))
    if query.end_user_id is not None:
        conditions.append((f"end_user_id = {m}", [query.end_user_id]))
    # One probe of session_tags' primary key per tag and session walked.
    conditions += [
        (f"EXISTS (SELECT 1 FROM session_tags WHERE session_tags.tag = {m}"
         " AND session_tags.session_id = sessions.session_id)", [tag])
        for tag in query.tags
    ]  # fmt: skip
    conditions += dialect_filters
    where = " AND ".join(condition for condition, _ in conditions) or "TRUE"
    order = "DESC" if query.newest_first else ""
    return (
        f"SELECT {SESSION_COLUMNS} FROM sessions WHERE {where} ORDER BY key {order} LIMIT {m}",
        [*(param for _, params in conditions for param in params), limit],
    )


def session_trees(
    dialect: SqlDialect, named: Condition, updated_before: float | None, end_user_id: str
) -> tuple[str, list[object]]:
    """`WITH RECURSIVE tree(session_id)`: the sessions `named`, last updated before
    `updated_before` or of `end_user_id` (when given), and all their descendants."""
    m = dialect.mark
    roots = [named]
    if updated_before is not None:
        roots.append((f"update_time < {m}", [updated_before]))
    if end_user_id:
        roots.append((f"end_user_id = {m}", [end_user_id]))
    return (
        "WITH RECURSIVE tree(session_id) AS (SELECT session_id FROM sessions WHERE "
        + " OR ".join(condition for condition, _ in roots)
        + " UNION SELECT s.session_id FROM sessions s JOIN tree t ON s.parent_session_id = t.session_id)",
        [param for _, params in roots for param in params],
    )


def delete_session_rows(run: RunCounted, doomed: Condition) -> DeletedCounts:
    """Deletes the sessions whose id meets `doomed`, with their calls, rewards and tags."""
    condition, params = doomed
    calls = run(f"DELETE FROM calls WHERE {condition}", params)
    rewards = run(f"DELETE FROM rewards WHERE {condition}", params)
    run(f"DELETE FROM session_tags WHERE {condition}", params)
    sessions = run(f"DELETE FROM sessions WHERE {condition}", params)
    return DeletedCounts(sessions, calls, rewards)


def one_row(row: Row | None) -> Row:
    """The row of a statement that always returns one: an aggregate, a counter, a row that exists."""
    if row is None:
        raise AssertionError("the statement returned no row")
    return row

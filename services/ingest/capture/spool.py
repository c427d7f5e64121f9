"""The local durable spool: captured calls wait here, in order, while the store is unreachable.

APSW SQLite in WAL mode with synchronous=FULL: a call in the spool survives a crash
of ingest or of the machine. Rows are replayed oldest first and deleted only after
the store has acknowledged them.

A call the store refuses as invalid is not retried forever in front of the others:
it moves to the `refused` table with the store's reason, where an operator can read
it (`SELECT reason, call FROM refused`). Capture never drops a call silently.

Late feedback (POST /sessions/{id}/feedback) that the store cannot take yet waits in
the `feedback` table, a serialized Reward per row, with the same guarantees; feedback
the store then refuses joins the `refused` table as kind 'feedback' (its `call`
column holds the Reward).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import apsw


def batch_length(sizes: Iterable[int], limit: int, max_bytes: int) -> int:
    """How many of the calls of these sizes, taken in order, make one batch: at most
    `limit` calls and `max_bytes` together, but always the first, however large."""
    count, total = 0, 0
    for size in itertools.islice(sizes, limit):
        if count and total + size > max_bytes:
            break
        count, total = count + 1, total + size
    return count


class Spool:
    def __init__(self, path: Path, max_bytes: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._db = apsw.Connection(str(path))
        self._db.set_busy_timeout(10_000)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS spool (seq INTEGER PRIMARY KEY AUTOINCREMENT, call BLOB NOT NULL)"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS refused (seq INTEGER PRIMARY KEY AUTOINCREMENT, call BLOB NOT NULL,"
            " reason TEXT NOT NULL, refuse_time REAL NOT NULL, kind TEXT NOT NULL DEFAULT 'call')"
        )
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(refused)")}
        if "kind" not in columns:
            # A spool written before feedback was spooled: every row it refused is a call.
            self._db.execute("ALTER TABLE refused ADD COLUMN kind TEXT NOT NULL DEFAULT 'call'")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS feedback (seq INTEGER PRIMARY KEY AUTOINCREMENT, reward BLOB NOT NULL,"
            " spool_time REAL NOT NULL)"
        )
        count, size = self._db.execute(
            "SELECT count(*), coalesce(sum(length(call)), 0) FROM spool"
        ).fetchall()[0]
        refused = {
            str(kind): _integer(rows)
            for kind, rows in self._db.execute("SELECT kind, count(*) FROM refused GROUP BY kind")
        }
        (feedback_count,) = self._db.execute("SELECT count(*) FROM feedback").fetchall()[0]
        self.count, self.bytes = _integer(count), _integer(size)
        self.refused_count = refused.get("call", 0)
        self.feedback_count = _integer(feedback_count)
        self.refused_feedback_count = refused.get("feedback", 0)

    @property
    def full(self) -> bool:
        return self.bytes >= self.max_bytes

    def append(self, calls: list[bytes]) -> None:
        """Durably add serialized calls at the end. Runs in a worker thread."""
        with self._lock, self._db:
            self._db.executemany("INSERT INTO spool (call) VALUES (?)", [(c,) for c in calls])
            self.count += len(calls)
            self.bytes += sum(map(len, calls))

    def oldest(self, limit: int, max_bytes: int) -> list[tuple[int, bytes]]:
        """Up to `limit` (seq, call) rows, oldest first, of at most `max_bytes` together
        unless the oldest alone is larger."""
        with self._lock:
            sizes = self._db.execute(
                "SELECT seq, length(call) FROM spool ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
            count = batch_length((_integer(size) for _, size in sizes), limit, max_bytes)
            if not count:
                return []
            return [(seq, bytes(call)) for seq, call in self._db.execute(
                "SELECT seq, call FROM spool WHERE seq <= ? ORDER BY seq", (sizes[count - 1][0],))]  # fmt: skip

    def refuse(self, call: bytes, reason: str) -> None:
        """Durably set aside a call the store will not take."""
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO refused (call, reason, refuse_time) VALUES (?, ?, ?)",
                (call, reason, time.time()),
            )
            self.refused_count += 1

    def remove_through(self, seq: int, removed_bytes: int, removed_count: int) -> None:
        """Forget everything up to and including `seq`, once the store holds it."""
        with self._lock, self._db:
            self._db.execute("DELETE FROM spool WHERE seq <= ?", (seq,))
            self.count -= removed_count
            self.bytes -= removed_bytes

    def append_feedback(self, reward: bytes) -> None:
        """Durably add a serialized Reward behind the feedback already waiting. Runs in a worker thread."""
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO feedback (reward, spool_time) VALUES (?, ?)", (reward, time.time())
            )
            self.feedback_count += 1

    def oldest_feedback(self, limit: int) -> list[tuple[int, bytes]]:
        """Up to `limit` (seq, reward) rows, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, reward FROM feedback ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
            return [(_integer(seq), _blob(reward)) for seq, reward in rows]

    def remove_feedback(self, seq: int) -> None:
        """Forget one feedback row, once the store holds it."""
        with self._lock, self._db:
            self._db.execute("DELETE FROM feedback WHERE seq = ?", (seq,))
            self.feedback_count -= self._db.changes()

    def refuse_feedback(self, seq: int, reason: str) -> None:
        """Move a feedback row the store will not take to `refused`, in one transaction: it is never both
        waiting and refused, nor neither."""
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO refused (call, reason, refuse_time, kind) SELECT reward, ?, ?, 'feedback' FROM feedback"
                " WHERE seq = ?", (reason, time.time(), seq),
            )  # fmt: skip
            if not self._db.changes():
                return
            self._db.execute("DELETE FROM feedback WHERE seq = ?", (seq,))
            self.feedback_count -= 1
            self.refused_feedback_count += 1

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _integer(value: object) -> int:
    """An INTEGER column's value (apsw types a column as any SQLite value)."""
    assert isinstance(value, int), value
    return value


def _blob(value: object) -> bytes:
    """A BLOB column's value."""
    assert isinstance(value, bytes), type(value)
    return value

"""Keeps a SQLite database's WAL bounded while writes never pause.

SQLite starts its WAL over from the beginning only when a write begins after a
checkpoint that copied every frame. A PASSIVE checkpoint copies the frames committed
before it began, so under steady commits (ingest's group commits, one every
millisecond or so) one almost always lands during it, and the WAL never started over:
at 1,400 calls/s it grew by about 20 MB/s for as long as the load lasted, and every
commit's fsync also had to extend the file (about 0.4 ms, against 0.1 ms for a sync
of blocks the file already has).

So: PASSIVE passes copy the bulk beside the writer without holding it up, and then the
writer itself, right after its next commit, copies the few frames committed meanwhile.
No commit can land during that last copy, so the write after it starts the WAL over.
Frames are counted by SQLite's WAL hook on the writer's connection, so nothing polls.
Should the thread fall behind (a machine whose cores are all busy), the writer copies the
whole WAL itself once it is twice its limit: a pause for the writer, but a bounded WAL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import structlog

log = structlog.get_logger(__name__)

# SQLite's WAL frame: a 24-byte header and one page.
_FRAME_HEADER_BYTES = 24
_PASSIVE_PASSES = 4
# Few enough for the writer to copy in about one commit's time.
_WRITER_FINISHES_AT_FRAMES = 64
# Past this many times its limit, the writer does not wait for the thread.
_WRITER_TAKES_OVER_AT = 2
# A reader still on the WAL keeps it from starting over; the next commit past the
# limit tries again, but no sooner than this, so those tries do not spin on fsyncs.
_RETRY_INTERVAL_S = 0.25


class WalCheckpointer:
    def __init__(
        self, path: Path, connect: Callable[[], apsw.Connection], page_size: int, wal_bytes: int
    ) -> None:
        self._path = path
        self._connect = connect
        self._due_at_frames = max(1, wal_bytes // (page_size + _FRAME_HEADER_BYTES))
        self._writer_takes_over_at_frames = _WRITER_TAKES_OVER_AT * self._due_at_frames
        self._writer_took_over = (-1, 0.0)  # the WAL's restarts then, and when
        self._due = threading.Event()
        self._closing = threading.Event()
        self._writer_finishes = False
        # The WAL's frames after the last commit, and how often it has started over.
        self._frames = 0
        self._restarts = 0
        self._thread = threading.Thread(
            target=self._checkpoint_when_due, name="sqlite-checkpoint", daemon=True
        )
        self._thread.start()

    def watch(self, writer: apsw.Connection) -> None:
        """Count the WAL's frames after each commit on `writer`, the database's one writer.

        It replaces SQLite's own automatic checkpoints, which copy the whole WAL inside a
        commit while every writer waits."""
        writer.set_wal_hook(self._committed)

    def close(self) -> None:
        self._closing.set()
        self._due.set()
        self._thread.join()

    def _committed(self, writer: apsw.Connection, _database: str, frames: int) -> int:
        # On the writer's thread, between its transactions: SQLite's own automatic
        # checkpoints run from this hook too.
        if frames < self._frames:
            self._restarts += 1
        self._frames = frames
        if self._writer_finishes:
            self._writer_finishes = False
            self._run(writer, "PASSIVE")
        elif frames >= self._writer_takes_over_at_frames and self._may_take_over():
            self._run(writer, "PASSIVE")
        elif frames >= self._due_at_frames:
            self._due.set()
        return apsw.SQLITE_OK

    def _may_take_over(self) -> bool:
        """Once the WAL has started over since the writer's last copy; else (a reader on the WAL keeps it from
        starting over, whoever copies it) at most once per retry interval."""
        restarts, at = self._writer_took_over
        now = time.monotonic()
        if restarts == self._restarts and now - at < _RETRY_INTERVAL_S:
            return False
        self._writer_took_over = (self._restarts, now)
        return True

    def _checkpoint_when_due(self) -> None:
        connection = self._connect()
        handed_over_at = -1
        try:
            while not self._closing.is_set():
                self._due.wait()
                if self._closing.is_set():
                    return
                if self._restarts == handed_over_at:
                    self._closing.wait(_RETRY_INTERVAL_S)
                # Each pass copies what the one before left, so they close in on the end.
                for _ in range(_PASSIVE_PASSES):
                    left = self._run(connection, "PASSIVE")
                    if left is None or left <= _WRITER_FINISHES_AT_FRAMES:
                        break
                self._due.clear()
                handed_over_at = self._restarts
                self._writer_finishes = True
        finally:
            connection.close()

    def _run(self, connection: apsw.Connection, mode: str) -> int | None:
        """The frames left in the WAL that the checkpoint did not copy; None if it failed."""
        # A checkpoint that fails (a full disk, an I/O error) is tried again after a
        # later commit: were the thread to end, the WAL would grow without bound.
        try:
            _, frames, copied = connection.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()[0]
            assert isinstance(frames, int) and isinstance(copied, int), (frames, copied)
        except apsw.BusyError:
            # The other side's checkpoint is running: it has the WAL in hand.
            return None
        except apsw.Error as error:
            log.warning("sqlite_checkpoint_failed", path=str(self._path), error=str(error))
            return None
        return frames - copied

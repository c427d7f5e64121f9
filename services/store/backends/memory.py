"""`memory://`: everything in process memory, gone on exit. For tests and throwaway runs."""

from __future__ import annotations

import bisect
import contextlib
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace

from parity.services.store.backends.base import StoreBackend
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


class MemoryBackend(StoreBackend):
    name = "memory"

    def __init__(self) -> None:
        self.store_id = uuid.uuid4().hex
        # Reentrant: a snapshot holds it across the reads it contains.
        self._lock = threading.RLock()
        self._calls: dict[str, CallRow] = {}
        self._calls_by_seq: list[CallRow] = []
        self._sessions: dict[str, SessionRow] = {}
        self._rewards: dict[str, RewardRow] = {}
        self._next_call_seq = 1
        self._next_session_key = 1
        self._next_reward_key = 1
        self._next_close_seq = 1
        # Closed sessions in close order, for the watch of closes.
        self._closed: list[SessionRow] = []

    def existing_call_ids(self, call_ids: Iterable[str]) -> set[str]:
        with self._lock:
            return {call_id for call_id in call_ids if call_id in self._calls}

    def commit_calls(self, batch: CallBatch) -> None:
        with self._lock:
            # Own sessions before ancestors, so a session's metadata wins over its
            # creation as some other session's ancestor in the same batch.
            for touch in batch.sessions:
                if touch.session_id not in self._sessions:
                    self._add_session(SessionRow(
                        touch.session_id, list(touch.parent_session_ids), dict(touch.metadata),
                        touch.end_user_id, list(touch.tags), create_time=touch.time, update_time=touch.time,
                    ))  # fmt: skip
            for touch in batch.sessions:
                session = self._session_for_write(
                    touch.session_id, touch.parent_session_ids, touch.metadata, touch.time
                )
                # A session first created as an ancestor or by a close takes its parents,
                # metadata, end user and tags from its own calls; once set, each is never rewritten.
                if not session.parent_session_ids:
                    session.parent_session_ids = list(touch.parent_session_ids)
                if not session.metadata:
                    session.metadata = dict(touch.metadata)
                if not session.end_user_id:
                    session.end_user_id = touch.end_user_id
                if not session.tags:
                    session.tags = list(touch.tags)
                session.call_count += touch.added_calls
                session.update_time = touch.time
            for row in batch.calls:
                row.seq = self._next_call_seq
                self._next_call_seq += 1
                self._calls[row.call_id] = row
                self._calls_by_seq.append(row)

    def _session_for_write(
        self, session_id: str, parents: list[str], metadata: dict[str, str], time: float
    ) -> SessionRow:
        """The session, created with its missing ancestors. Caller holds the lock."""
        for depth, ancestor in enumerate(parents):
            if ancestor not in self._sessions:
                self._add_session(
                    SessionRow(ancestor, parents[:depth], {}, create_time=time, update_time=time)
                )
        if session_id not in self._sessions:
            self._add_session(
                SessionRow(
                    session_id, list(parents), dict(metadata), create_time=time, update_time=time
                )
            )
        return self._sessions[session_id]

    def _add_session(self, session: SessionRow) -> None:
        session.key = self._next_session_key
        self._next_session_key += 1
        self._sessions[session.session_id] = session

    def insert_rewards(self, rewards: list[RewardRow]) -> list[bool]:
        inserted = []
        with self._lock:
            for reward in rewards:
                new = reward.reward_id not in self._rewards
                if new:
                    reward.key = self._next_reward_key
                    self._next_reward_key += 1
                    self._rewards[reward.reward_id] = reward
                inserted.append(new)
        return inserted

    def close_sessions(self, closes: list[SessionClose], time: float) -> list[SessionRow]:
        closed = []
        with self._lock:
            for close in closes:
                session = self._session_for_write(close.session_id, [], {}, time)
                session.metadata.update(close.metadata)
                if session.state != SESSION_STATE_CLOSED:
                    session.state, session.outcome, session.error_message = (
                        SESSION_STATE_CLOSED, close.outcome, close.error_message)  # fmt: skip
                    session.close_time = session.update_time = time
                    session.close_seq = self._next_close_seq
                    self._next_close_seq += 1
                    self._closed.append(session)
                closed.append(_copy(session))
        return closed

    def update_session_metadata(self, updates: list[MetadataUpdate]) -> set[str]:
        changed = set()
        with self._lock:
            for update in updates:
                session = self._sessions[update.session_id]
                metadata = update.apply(session.metadata)
                if metadata != session.metadata:
                    session.metadata = metadata
                    changed.add(update.session_id)
        return changed

    def delete_sessions(
        self, session_ids: list[str], updated_before: float | None, end_user_id: str = ""
    ) -> DeletedCounts:
        with self._lock:
            doomed = set(session_ids)
            if updated_before is not None:
                doomed |= {
                    s.session_id for s in self._sessions.values() if s.update_time < updated_before
                }
            if end_user_id:
                doomed |= {
                    s.session_id for s in self._sessions.values() if s.end_user_id == end_user_id
                }
            doomed |= {
                s.session_id
                for s in self._sessions.values()
                if doomed.intersection(s.parent_session_ids)
            }
            doomed &= self._sessions.keys()
            calls_before, rewards_before = len(self._calls), len(self._rewards)
            self._calls_by_seq = [row for row in self._calls_by_seq if row.session_id not in doomed]
            self._calls = {row.call_id: row for row in self._calls_by_seq}
            self._rewards = {k: r for k, r in self._rewards.items() if r.session_id not in doomed}
            for session_id in doomed:
                del self._sessions[session_id]
            self._closed = [session for session in self._closed if session.session_id not in doomed]
            return DeletedCounts(
                len(doomed), calls_before - len(self._calls), rewards_before - len(self._rewards)
            )

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        # Every write takes the lock too, so none commits until the reads are done.
        with self._lock:
            yield

    def get_call_rows(self, call_ids: Iterable[str]) -> dict[str, CallRow]:
        with self._lock:
            return {call_id: self._calls[call_id] for call_id in call_ids if call_id in self._calls}

    def last_trajectory_calls(
        self, keys: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], CallRow]:
        wanted = set(keys)
        found: dict[tuple[str, str], CallRow] = {}
        with self._lock:
            for row in self._calls_by_seq:
                key = (row.session_id, row.trajectory_name)
                if key in wanted:
                    found[key] = row
        return found

    def list_call_rows(self, session_id: str, after_seq: int, limit: int) -> list[CallRow]:
        with self._lock:
            rows = [
                r for r in self._calls_by_seq if r.session_id == session_id and r.seq > after_seq
            ]
        return rows[:limit]

    def call_rows_after(self, seq: int, limit: int) -> list[CallRow]:
        with self._lock:
            start = bisect.bisect_right(self._calls_by_seq, seq, key=lambda row: row.seq)
            return self._calls_by_seq[start : start + limit]

    def get_reward_rows(self, reward_ids: Iterable[str]) -> dict[str, RewardRow]:
        with self._lock:
            return {r: self._rewards[r] for r in reward_ids if r in self._rewards}

    def list_reward_rows(self, session_id: str, after_key: int, limit: int) -> list[RewardRow]:
        with self._lock:
            rows = sorted(
                (
                    r
                    for r in self._rewards.values()
                    if r.session_id == session_id and r.key > after_key
                ),
                key=lambda r: r.key,
            )
        return rows[:limit]

    def session_call_rows(self, session_ids: Iterable[str]) -> list[CallRow]:
        wanted = set(session_ids)
        with self._lock:
            return [row for row in self._calls_by_seq if row.session_id in wanted]

    def session_reward_rows(self, session_ids: Iterable[str]) -> list[RewardRow]:
        wanted = set(session_ids)
        with self._lock:
            return sorted(
                (r for r in self._rewards.values() if r.session_id in wanted), key=lambda r: r.key
            )

    def get_sessions(self, session_ids: Iterable[str]) -> dict[str, SessionRow]:
        with self._lock:
            return {s: _copy(self._sessions[s]) for s in session_ids if s in self._sessions}

    def sessions_closed_after(self, close_seq: int, limit: int) -> list[SessionRow]:
        with self._lock:
            start = bisect.bisect_right(
                self._closed, close_seq, key=lambda session: session.close_seq
            )
            return [_copy(session) for session in self._closed[start : start + limit]]

    def get_session(self, session_id: str) -> SessionRow | None:
        with self._lock:
            session = self._sessions.get(session_id)
            return _copy(session) if session else None

    def list_sessions(self, query: SessionQuery, position: int, limit: int) -> list[SessionRow]:
        with self._lock:
            rows = [
                _copy(s) for s in self._sessions.values()
                if (not position or (s.key < position if query.newest_first else s.key > position)) and query.matches(s)
            ]  # fmt: skip
        return sorted(rows, key=lambda s: s.key, reverse=query.newest_first)[:limit]

    def latest_call_seq(self) -> int:
        with self._lock:
            return self._calls_by_seq[-1].seq if self._calls_by_seq else 0

    def close(self) -> None:
        """Nothing to release: the data goes with the process."""

    def stats(self) -> BackendStats:
        with self._lock:
            return BackendStats(
                session_count=len(self._sessions),
                call_count=len(self._calls),
                reward_count=len(self._rewards),
                logical_token_count=sum(row.logical_tokens for row in self._calls_by_seq),
                bytes_on_disk=0,
            )


def _copy(session: SessionRow) -> SessionRow:
    return replace(
        session, parent_session_ids=list(session.parent_session_ids), metadata=dict(session.metadata),
        tags=list(session.tags),
    )  # fmt: skip

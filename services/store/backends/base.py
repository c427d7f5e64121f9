"""The interface every store backend implements, and the conformance suite checks.

Methods are synchronous and called from worker threads: writes only ever from the
store's single writer, reads from any thread. A write method is one transaction:
it commits whole or not at all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from contextlib import AbstractContextManager

from parity.services.store.records import (
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


class StoreBackend(ABC):
    name: str
    # Random id fixed when the database is created; tags watch cursors.
    store_id: str

    # Writes.
    @abstractmethod
    def existing_call_ids(self, call_ids: Iterable[str]) -> set[str]:
        """The subset of `call_ids` already stored."""

    @abstractmethod
    def commit_calls(self, batch: CallBatch) -> None:
        """Insert the calls (assigning `seq` in list order) and upsert their sessions."""

    @abstractmethod
    def insert_rewards(self, rewards: list[RewardRow]) -> list[bool]:
        """Insert rewards not already stored; returns, per reward, whether it was new."""

    @abstractmethod
    def close_sessions(self, closes: list[SessionClose], time: float) -> list[SessionRow]:
        """Close each session, creating it (with no calls) if it does not exist, and merge
        its metadata. A session closing now takes the next close sequence number (never
        reused); one already closed keeps its state and only takes the metadata."""

    @abstractmethod
    def update_session_metadata(self, updates: list[MetadataUpdate]) -> set[str]:
        """Apply each update, in order, to an existing session; returns the ids of the
        sessions whose metadata changed."""

    @abstractmethod
    def delete_sessions(
        self, session_ids: list[str], updated_before: float | None, end_user_id: str = ""
    ) -> DeletedCounts:
        """Delete the sessions, every session last updated before `updated_before` and
        every session of `end_user_id` (when given), with their descendants, calls, rewards
        and tags. Ids and end users the store does not know delete nothing."""

    # Reads.
    @abstractmethod
    def snapshot(self) -> AbstractContextManager[None]:
        """Reads this thread makes inside see the store as of one moment, however many
        statements they take: a write committing meanwhile stays invisible to them.
        Not nested."""

    @abstractmethod
    def get_call_rows(self, call_ids: Iterable[str]) -> dict[str, CallRow]: ...

    @abstractmethod
    def last_trajectory_calls(
        self, keys: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], CallRow]:
        """The latest call of each (session_id, trajectory_name) that has one."""

    @abstractmethod
    def list_call_rows(self, session_id: str, after_seq: int, limit: int) -> list[CallRow]: ...

    @abstractmethod
    def call_rows_after(self, seq: int, limit: int) -> list[CallRow]:
        """Calls committed after `seq`, in commit order."""

    @abstractmethod
    def get_reward_rows(self, reward_ids: Iterable[str]) -> dict[str, RewardRow]:
        """The rewards that exist among `reward_ids`."""

    @abstractmethod
    def list_reward_rows(self, session_id: str, after_key: int, limit: int) -> list[RewardRow]: ...

    @abstractmethod
    def session_call_rows(self, session_ids: Iterable[str]) -> list[CallRow]:
        """Every call of the sessions, in commit order."""

    @abstractmethod
    def session_reward_rows(self, session_ids: Iterable[str]) -> list[RewardRow]:
        """Every reward of the sessions, in write order."""

    @abstractmethod
    def get_sessions(self, session_ids: Iterable[str]) -> dict[str, SessionRow]:
        """The sessions that exist among `session_ids`."""

    @abstractmethod
    def sessions_closed_after(self, close_seq: int, limit: int) -> list[SessionRow]:
        """Closed sessions with a close sequence number above `close_seq`, in close order."""

    @abstractmethod
    def get_session(self, session_id: str) -> SessionRow | None: ...

    @abstractmethod
    def list_sessions(self, query: SessionQuery, position: int, limit: int) -> list[SessionRow]:
        """Sessions matching `query` in its order, from past the key `position` (0: from
        the start, in either order)."""

    @abstractmethod
    def latest_call_seq(self) -> int:
        """The commit sequence number of the latest stored call; 0 when there is none."""

    @abstractmethod
    def stats(self) -> BackendStats: ...

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

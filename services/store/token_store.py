"""The token store's domain logic, over any backend.

Writes are validated here and committed by one writer in groups (write_queue.py,
commits.py); reads decode calls through their reference chains (call_reader.py); the
watches follow commits as they land.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import structlog

from parity.api.common.v1 import llm_call_pb2, reward_pb2
from parity.services.runtime import page_tokens
from parity.services.runtime.errors import InvalidArgument, NotFound
from parity.services.runtime.page_tokens import decode_page_token, encode_page_token
from parity.services.store import call_codec, validation
from parity.services.store.backends.base import StoreBackend
from parity.services.store.call_reader import CallReader
from parity.services.store.commits import StoreCommits, WriteResult
from parity.services.store.cursors import decode_cursor, encode_cursor
from parity.services.store.records import (
    BackendStats,
    CallRow,
    DeletedCounts,
    MetadataUpdate,
    RewardRow,
    SessionClose,
    SessionQuery,
    SessionRow,
)
from parity.services.store.write_queue import WriteQueue

log = structlog.get_logger(__name__)

Row = TypeVar("Row", CallRow, RewardRow)
Item = TypeVar("Item")
SESSION_OUTCOME_SUCCEEDED = 1
# How many calls one transaction takes at most; a burst beyond it commits in several.
MAX_GROUP_CALLS = 10_000


@dataclass(frozen=True)
class PromptSplice:
    """How to rebuild a prompt from an earlier call of its trajectory, in tokens."""

    call_id: str
    base_call_id: str
    base_choice: int
    prefix_tokens: int
    suffix_tokens: int
    middle: bytes


@dataclass(frozen=True)
class SessionContents:
    """A session with everything recorded under it."""

    session: SessionRow
    calls: list[llm_call_pb2.LlmCall]
    rewards: list[reward_pb2.Reward]
    # In the spliced view, one per call whose prompt came empty.
    splices: list[PromptSplice] = field(default_factory=list)


class TokenStore:
    def __init__(
        self,
        backend: StoreBackend,
        *,
        trajectory_cache_size: int = 8192,
        watch_poll_s: float = 1.0,
        watch_heartbeat_s: float = 10.0,
        retention_s: float | None = None,
    ) -> None:
        self.backend = backend
        self.retention_s = retention_s
        self.watch_poll_s = watch_poll_s
        self.watch_heartbeat_s = watch_heartbeat_s
        self._reader = CallReader(backend, trajectory_cache_size)
        self._commits = StoreCommits(backend, self._reader, trajectory_cache_size)
        self._writes = WriteQueue("token-store-writer", MAX_GROUP_CALLS)
        self._draining = False
        self._tasks: list[asyncio.Task[None]] = []

    # Lifecycle.
    async def start(self) -> None:
        self._writes.start()
        if self.retention_s:
            self._tasks.append(
                asyncio.create_task(self._retention_loop(), name="token-store-retention")
            )

    def drain(self) -> None:
        """Shutdown has begun: end the watches, whose clients resume from their cursors,
        rather than hold the server's grace period open."""
        self._draining = True
        self._writes.wake_readers()

    async def stop(self) -> None:
        """Finish every queued write, then release the backend."""
        await self._writes.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.to_thread(self.backend.close)

    async def _retention_loop(self) -> None:
        assert self.retention_s
        while True:
            # One failed pass (a locked or restarting database) must not end retention.
            try:
                deleted = await self.delete_sessions([], time.time() - self.retention_s)
            except Exception:
                log.exception("retention_failed")
            else:
                if deleted.sessions:
                    log.info("retention_deleted", **deleted._asdict())
            await asyncio.sleep(min(self.retention_s / 10, 300.0))

    # Writes.
    async def write_calls(self, calls: Sequence[llm_call_pb2.LlmCall]) -> WriteResult:
        """Store the calls durably. Takes ownership of the messages: their token and
        request fields are moved into storage, not copied."""
        validation.check_calls(calls)
        if not calls:
            return WriteResult(0, 0)
        return await self._writes.submit(self._commits.calls, calls, weight=len(calls))

    async def write_rewards(self, rewards: Sequence[reward_pb2.Reward]) -> WriteResult:
        validation.check_rewards(rewards)
        if not rewards:
            return WriteResult(0, 0)
        return await self._writes.submit(self._commits.rewards, rewards)

    async def close_session(
        self,
        session_id: str,
        outcome: int,
        error_message: str,
        metadata: dict[str, str] | None = None,
    ) -> SessionRow:
        validation.check_required_id(session_id, "session_id")
        validation.check_text(error_message, "error_message")
        validation.check_metadata(metadata or {}, "metadata")
        close = SessionClose(
            session_id, outcome or SESSION_OUTCOME_SUCCEEDED, error_message, dict(metadata or {})
        )
        return await self._writes.submit(self._commits.closes, close)

    async def update_session_metadata(self, updates: Sequence[MetadataUpdate]) -> int:
        """Apply every update in one transaction; returns how many sessions changed."""
        validation.check_metadata_updates(updates)
        if not updates:
            return 0
        return await self._writes.submit(self._commits.metadata, list(updates))

    async def delete_sessions(
        self, session_ids: Sequence[str], updated_before: float | None, end_user_id: str = ""
    ) -> DeletedCounts:
        """Deletes the sessions named, idle since `updated_before` and of `end_user_id`,
        with their descendants, in one transaction. What matches nothing deletes nothing."""
        if not session_ids and updated_before is None and not end_user_id:
            raise InvalidArgument("give session_ids, updated_before, end_user_id, or several")
        for position, session_id in enumerate(session_ids):
            validation.check_required_id(session_id, f"session_ids[{position}]")
        validation.check_end_user_id(end_user_id, "end_user_id")
        deletion = (list(session_ids), updated_before, end_user_id)
        return await self._writes.submit(self._commits.delete, deletion, alone=True)

    # Reads.
    # Each read runs in one backend snapshot, with the reference rows its calls splice
    # against: a delete committing halfway through cannot leave a reference missing.
    async def get_call(self, call_id: str, full: bool) -> llm_call_pb2.LlmCall:
        validation.check_required_id(call_id, "call_id")

        def read() -> list[llm_call_pb2.LlmCall]:
            with self._reader.snapshot() as cache:
                rows = list(self.backend.get_call_rows([call_id]).values())
                references = self._reader.references(rows, cache) if full else None
            return self._reader.render(rows, references)

        calls = await asyncio.to_thread(read)
        if not calls:
            raise NotFound(f"call {call_id!r} does not exist")
        return calls[0]

    async def list_calls(
        self, session_id: str, page_size: int, page_token: str, full: bool
    ) -> tuple[list[llm_call_pb2.LlmCall], str]:
        def read() -> tuple[list[llm_call_pb2.LlmCall], str]:
            with self._reader.snapshot() as cache:
                rows, next_token = self._session_page(
                    "calls",
                    session_id,
                    page_size,
                    page_token,
                    self.backend.list_call_rows,
                    lambda row: row.seq,
                )
                references = self._reader.references(rows, cache) if full else None
            return self._reader.render(rows, references), next_token

        return await asyncio.to_thread(read)

    async def watch_calls(
        self, cursor: str, full: bool, max_batch_size: int, from_latest: bool = False
    ) -> AsyncGenerator[tuple[list[llm_call_pb2.LlmCall], str], None]:
        """Yields (calls, cursor after them); an empty list is a heartbeat. `from_latest`
        with no cursor starts after the latest call stored now."""
        start = decode_cursor(cursor, self.backend.store_id)
        if from_latest and not cursor:
            start = await asyncio.to_thread(self.backend.latest_call_seq)
        limit = page_tokens.page_size(max_batch_size)

        def read(after: int) -> tuple[list[llm_call_pb2.LlmCall], int]:
            with self._reader.snapshot() as cache:
                rows = self.backend.call_rows_after(after, limit)
                references = self._reader.references(rows, cache) if full else None
            return self._reader.render(rows, references), rows[-1].seq if rows else after

        async for calls, seq in self._follow(read, start):
            yield calls, encode_cursor(self.backend.store_id, seq)

    async def watch_closed_sessions(
        self, cursor: str, max_batch_size: int
    ) -> AsyncGenerator[tuple[list[SessionRow], str], None]:
        """Yields (sessions closed after the cursor, in close order; cursor after them);
        an empty list is a heartbeat, or, after a full page with nothing behind it, the
        sign that the reader has caught up."""
        start = decode_cursor(cursor, self.backend.store_id, "closes")
        limit = page_tokens.page_size(max_batch_size)

        def read(after: int) -> tuple[list[SessionRow], int]:
            rows = self.backend.sessions_closed_after(after, limit)
            return rows, rows[-1].close_seq if rows else after

        async for rows, close_seq in self._follow(read, start, full_page=limit):
            yield rows, encode_cursor(self.backend.store_id, close_seq, "closes")

    async def _follow(
        self, read: Callable[[int], tuple[list[Item], int]], position: int, full_page: int = 0
    ) -> AsyncGenerator[tuple[list[Item], int], None]:
        """What `read` finds after `position`, as commits land, with the position after it; an empty list
        when nothing came for the heartbeat interval. With `full_page`, a page that came full is followed by
        an empty one once nothing is behind it: a message shorter than a page tells the reader it caught up."""
        last_sent = time.monotonic()
        after_full_page = False
        while not self._draining:
            committed = self._writes.committed
            items, position = await asyncio.to_thread(read, position)
            if items or after_full_page:
                after_full_page = bool(full_page) and len(items) == full_page
                yield items, position
                last_sent = time.monotonic()
                continue
            # Due only after a read found nothing: a commit that woke the wait is read first.
            if time.monotonic() - last_sent >= self.watch_heartbeat_s:
                yield [], position
                last_sent = time.monotonic()
            # Woken by this process's commits; the poll catches other writers sharing the database.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(committed.wait(), timeout=self.watch_poll_s)

    async def batch_get_sessions(
        self, session_ids: Sequence[str], view: str
    ) -> tuple[list[SessionContents], list[str]]:
        """The sessions that exist, in request order, with their calls and rewards; and
        the ids that do not. `view` is "basic", "full" or "spliced": stored prompt
        splices as they are, nothing materialized (see CALL_VIEW_SPLICED)."""
        validation.check_session_ids(session_ids)
        wanted = list(dict.fromkeys(session_ids))

        def read() -> tuple[
            dict[str, SessionRow], list[CallRow], list[RewardRow], list[llm_call_pb2.LlmCall]
        ]:
            with self._reader.snapshot() as cache:
                sessions = self.backend.get_sessions(wanted)
                call_rows = self.backend.session_call_rows(sessions)
                reward_rows = self.backend.session_reward_rows(sessions)
                references = self._reader.references(call_rows, cache) if view == "full" else None
            # The spliced view is built from the rows as they are stored.
            calls = [] if view == "spliced" else self._reader.render(call_rows, references)
            return sessions, call_rows, reward_rows, calls

        sessions, call_rows, reward_rows, calls = await asyncio.to_thread(read)
        contents = {
            sid: SessionContents(sessions[sid], [], []) for sid in wanted if sid in sessions
        }
        if view == "spliced":
            for row in call_rows:
                call, splice = call_codec.spliced_view(row)
                contents[call.session_id].calls.append(call)
                if splice is not None:
                    contents[call.session_id].splices.append(PromptSplice(*splice))
        else:
            for call in calls:
                contents[call.session_id].calls.append(call)
        for reward_row in reward_rows:
            contents[reward_row.session_id].rewards.append(
                reward_pb2.Reward.FromString(reward_row.body)
            )
        return list(contents.values()), [sid for sid in wanted if sid not in sessions]

    async def list_rewards(
        self, session_id: str, page_size: int, page_token: str
    ) -> tuple[list[reward_pb2.Reward], str]:
        def read() -> tuple[list[RewardRow], str]:
            with self.backend.snapshot():
                return self._session_page(
                    "rewards",
                    session_id,
                    page_size,
                    page_token,
                    self.backend.list_reward_rows,
                    lambda row: row.key,
                )

        rows, next_token = await asyncio.to_thread(read)
        return [reward_pb2.Reward.FromString(r.body) for r in rows], next_token

    def _session_page(
        self,
        kind: str,
        session_id: str,
        page_size: int,
        page_token: str,
        fetch: Callable[[str, int, int], list[Row]],
        key_of: Callable[[Row], int],
    ) -> tuple[list[Row], str]:
        """One page of a session's rows; NOT_FOUND for an unknown session."""
        validation.check_required_id(session_id, "session_id")
        scope = f"{kind}:{session_id}"
        after = decode_page_token(page_token, scope)
        limit = page_tokens.page_size(page_size)
        if after == 0 and self.backend.get_session(session_id) is None:
            raise NotFound(f"session {session_id!r} does not exist")
        rows = fetch(session_id, after, limit + 1)
        next_token = encode_page_token(scope, key_of(rows[limit - 1])) if len(rows) > limit else ""
        return rows[:limit], next_token

    async def get_session(self, session_id: str) -> SessionRow:
        validation.check_required_id(session_id, "session_id")
        session = await asyncio.to_thread(self.backend.get_session, session_id)
        if session is None:
            raise NotFound(f"session {session_id!r} does not exist")
        return session

    async def list_sessions(
        self, query: SessionQuery, page_size: int, page_token: str
    ) -> tuple[list[SessionRow], str]:
        validation.check_id(query.parent_session_id or "", "parent_session_id")
        validation.check_id(query.session_id_prefix, "session_id_prefix")
        validation.check_metadata(dict(query.metadata), "metadata")
        validation.check_end_user_id(query.end_user_id or "", "end_user_id")
        # In any order and with repeats: a filter is a set of tags.
        query = replace(query, tags=validation.check_tags(query.tags, "tags"))
        scope = query.scope()
        position = decode_page_token(page_token, scope)
        limit = page_tokens.page_size(page_size)
        rows = await asyncio.to_thread(self.backend.list_sessions, query, position, limit + 1)
        next_token = encode_page_token(scope, rows[limit - 1].key) if len(rows) > limit else ""
        return rows[:limit], next_token

    async def stats(self) -> BackendStats:
        return await asyncio.to_thread(self.backend.stats)

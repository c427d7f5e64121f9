"""The token store's domain logic, over any backend.

Writes go through one writer task. It takes every write queued while the previous
transaction was committing and commits those of one kind (calls, rewards, closes,
metadata updates) together, so concurrent writers share one transaction (and one
fsync) instead of queueing on the database lock. A request that is refused (an
unknown session, a conflicting close) fails alone; the others in its transaction
commit. A request's future resolves only after its transaction commits: an
acknowledged write is durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from parity.api.common.v1 import llm_call_pb2, reward_pb2
from parity.ids import new_id
from parity.services.runtime import page_tokens
from parity.services.runtime.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ParityError,
)
from parity.services.runtime.page_tokens import decode_page_token, encode_page_token
from parity.services.store import call_codec, validation
from parity.services.store.backends.base import StoreBackend
from parity.services.store.call_codec import CallTokens
from parity.services.store.cursors import decode_cursor, encode_cursor
from parity.services.store.records import (
    SESSION_STATE_CLOSED,
    BackendStats,
    CallBatch,
    CallRow,
    MetadataUpdate,
    RewardRow,
    SessionClose,
    SessionQuery,
    SessionRow,
    SessionTouch,
)
from parity.services.store.writer_thread import WriterThread

log = structlog.get_logger(__name__)

Row = TypeVar("Row", CallRow, RewardRow)
SESSION_OUTCOME_SUCCEEDED = 1
# How many calls one transaction takes at most; a burst beyond it commits in several.
MAX_GROUP_CALLS = 10_000


@dataclass(frozen=True)
class WriteResult:
    written: int
    duplicates: int


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


@dataclass(frozen=True)
class _References:
    """What decoding full calls needs beyond their own rows, read in their snapshot."""

    # The calls' rows and every row their reference chains pass through.
    rows: dict[str, CallRow]
    # Decoded tokens: cached references, then each call as it is decoded.
    tokens: dict[str, CallTokens]
    # Where the calls, once decoded, are cached.
    cache: _LruCache


@dataclass
class _Job:
    kind: str
    payload: Any
    future: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class _LruCache:
    """A small LRU map; guarded by the caller where threads share it."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Any, CallTokens] = OrderedDict()

    def get(self, key: Any) -> CallTokens | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: Any, value: CallTokens) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)


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
        # Writer-only: the latest call of each (session, trajectory), to splice the next against.
        self._tails = _LruCache(trajectory_cache_size)
        # Readers: recently decoded calls, so a watcher reading turn N does not
        # re-fetch and re-decode turns 1..N-1 from the backend.
        self._recent = _LruCache(trajectory_cache_size)
        self._recent_lock = threading.Lock()
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._writer = WriterThread("token-store-writer")
        self._committed = asyncio.Event()
        self._draining = False
        self._tasks: list[asyncio.Task[None]] = []

    # Lifecycle.
    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._write_loop(), name="token-store-writer"))
        if self.retention_s:
            self._tasks.append(asyncio.create_task(self._retention_loop(), name="token-store-retention"))

    def drain(self) -> None:
        """Shutdown has begun: end the watches, whose clients resume from their cursors,
        rather than hold the server's grace period open."""
        self._draining = True
        self._committed.set()

    async def stop(self) -> None:
        """Finish every queued write, then release the backend."""
        await self._queue.join()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.to_thread(self._writer.close)
        await asyncio.to_thread(self.backend.close)

    async def _retention_loop(self) -> None:
        assert self.retention_s
        while True:
            # One failed pass (a locked or restarting database) must not end retention.
            try:
                sessions, calls = await self.delete_sessions([], time.time() - self.retention_s)
            except Exception:
                log.exception("retention_failed")
            else:
                if sessions:
                    log.info("retention_deleted", sessions=sessions, calls=calls)
            await asyncio.sleep(min(self.retention_s / 10, 300.0))

    # Writes.
    async def write_calls(self, calls: Sequence[llm_call_pb2.LlmCall]) -> WriteResult:
        """Store the calls durably. Takes ownership of the messages: their token and
        request fields are moved into storage, not copied."""
        validation.check_calls(calls)
        if not calls:
            return WriteResult(0, 0)
        return await self._submit("calls", calls)

    async def write_rewards(self, rewards: Sequence[reward_pb2.Reward]) -> WriteResult:
        validation.check_rewards(rewards)
        if not rewards:
            return WriteResult(0, 0)
        return await self._submit("rewards", rewards)

    async def close_session(
        self, session_id: str, outcome: int, error_message: str, metadata: dict[str, str] | None = None
    ) -> SessionRow:
        validation.check_required_id(session_id, "session_id")
        validation.check_text(error_message, "error_message")
        validation.check_metadata(metadata or {}, "metadata")
        close = SessionClose(session_id, outcome or SESSION_OUTCOME_SUCCEEDED, error_message, dict(metadata or {}))
        return await self._submit("close", close)

    async def update_session_metadata(self, updates: Sequence[MetadataUpdate]) -> int:
        """Apply every update in one transaction; returns how many sessions changed."""
        validation.check_metadata_updates(updates)
        if not updates:
            return 0
        return await self._submit("metadata", list(updates))

    async def delete_sessions(self, session_ids: Sequence[str], updated_before: float | None) -> tuple[int, int]:
        if not session_ids and updated_before is None:
            raise InvalidArgument("give session_ids, updated_before, or both")
        for position, session_id in enumerate(session_ids):
            validation.check_required_id(session_id, f"session_ids[{position}]")
        return await self._submit("delete", (list(session_ids), updated_before))

    async def _submit(self, kind: str, payload: Any) -> Any:
        job = _Job(kind, payload)
        self._queue.put_nowait(job)
        return await job.future

    async def _write_loop(self) -> None:
        while True:
            first = await self._queue.get()
            jobs = [first]
            calls = len(first.payload) if first.kind == "calls" else 0
            while not self._queue.empty() and calls < MAX_GROUP_CALLS:
                job = self._queue.get_nowait()
                jobs.append(job)
                calls += len(job.payload) if job.kind == "calls" else 0
            # Writes queued together were concurrent, so any order among them is one
            # their callers could have seen: each kind commits as one transaction.
            # Deletes run alone; they are rare and touch many rows.
            groups: dict[str, list[_Job]] = {}
            for job in jobs:
                groups.setdefault(job.kind, []).append(job)
            for kind, group in groups.items():
                for part in ([job] for job in group) if kind == "delete" else [group]:
                    try:
                        await self._run_group(part)
                    except Exception as error:
                        # The writer serves every later write and stop()'s join: whatever
                        # went wrong in one group, it answers that group and goes on.
                        log.exception("write_group_failed", kind=kind, requests=len(part))
                        for job in part:
                            _settle(job, error)

    async def _run_group(self, jobs: list[_Job]) -> None:
        try:
            results = await self._writer.run(self._run_jobs, jobs)
        except Exception as error:  # noqa: BLE001 - every waiter must hear about it
            if isinstance(error, ParityError):
                # Expected and explained (a full disk, a lost database connection), and
                # retried by callers while it lasts: a traceback each time would only
                # fill the log, on what may be the full disk.
                log.warning("write_failed", kind=jobs[0].kind, requests=len(jobs), error=str(error))
            else:
                log.error("write_failed", kind=jobs[0].kind, requests=len(jobs), exc_info=error)
            for job in jobs:
                _settle(job, error)
        else:
            for job, result in zip(jobs, results, strict=False):
                _settle(job, result)
            self._committed.set()
            self._committed = asyncio.Event()
        finally:
            for _ in jobs:
                self._queue.task_done()

    def _run_jobs(self, jobs: list[_Job]) -> list[Any]:
        """Runs on the writer thread: one transaction for the group. Returns one result
        per job, or the error that refused that job alone."""
        kind, payloads = jobs[0].kind, [job.payload for job in jobs]
        if kind == "calls":
            return self._commit_calls(payloads)
        if kind == "rewards":
            return self._commit_rewards(payloads)
        if kind == "close":
            return self._commit_closes(payloads)
        if kind == "metadata":
            return self._commit_metadata(payloads)
        try:
            return [self._commit_delete(*payloads[0])]
        except (InvalidArgument, NotFound, FailedPrecondition) as error:
            return [error]

    def _commit_calls(self, requests: list[Sequence[llm_call_pb2.LlmCall]]) -> list[WriteResult]:
        now = time.time()
        # Each read of a message's field builds a new string: read each call's ids once.
        requests_ids = [[(call, call.call_id, call.session_id, call.trajectory_name) for call in calls] for calls in requests]
        existing = self.backend.existing_call_ids(call_id for calls in requests_ids for _, call_id, _, _ in calls)
        self._load_tails(
            {(session_id, name) for calls in requests_ids for _, call_id, session_id, name in calls if call_id not in existing}
        )
        batch = CallBatch()
        touches: dict[str, SessionTouch] = {}
        # Tails as they will be once this batch commits; published only after it does.
        pending_tails: dict[tuple[str, str], CallTokens] = {}
        results = []
        for calls in requests_ids:
            written = 0
            for call, call_id, session_id, name in calls:
                if call_id in existing:
                    continue
                existing.add(call_id)
                key = (session_id, name)
                ref = pending_tails.get(key) or self._tails.get(key)
                row, pending_tails[key] = call_codec.encode_call(call, call_id, key, ref, now)
                batch.calls.append(row)
                touch = touches.get(session_id)
                if touch is None:
                    # Most calls carry neither; copying an empty protobuf container costs more
                    # than the test.
                    parents, metadata = call.parent_session_ids, call.metadata
                    touch = touches[session_id] = SessionTouch(
                        session_id, list(parents) if parents else [], dict(metadata) if metadata else {}, 0, now
                    )
                touch.added_calls += 1
                written += 1
            results.append(WriteResult(written, len(calls) - written))
        if batch.calls:
            batch.sessions = list(touches.values())
            self.backend.commit_calls(batch)
            for key, tokens in pending_tails.items():
                self._tails.put(key, tokens)
        return results

    def _load_tails(self, keys: set[tuple[str, str]]) -> None:
        """Bring trajectories' latest calls into the cache, with one query for all misses
        (after a restart, or once the cache has evicted them)."""
        missing = [key for key in keys if self._tails.get(key) is None]
        if not missing:
            return
        with self._snapshot() as cache:
            rows = self.backend.last_trajectory_calls(missing)
            references = self._references(list(rows.values()), cache)
        for key, call in zip(rows, self._render(list(rows.values()), references), strict=True):
            self._tails.put(key, CallTokens.of(call, rows[key].ref_depth))

    def _commit_rewards(self, requests: list[Sequence[reward_pb2.Reward]]) -> list[Any]:
        now = time.time()
        known = self.backend.get_sessions({r.session_id for rewards in requests for r in rewards}).keys()
        step_calls = self.backend.get_call_rows(
            {r.call_id for rewards in requests for r in rewards if r.WhichOneof("step") == "call_id"}
        )
        results: list[Any] = []
        rows: list[RewardRow] = []
        for rewards in requests:
            try:
                _check_reward_targets(rewards, known, step_calls)
            except (NotFound, InvalidArgument) as error:
                results.append(error)
                continue
            results.append(len(rewards))
            for reward in rewards:
                stored = reward_pb2.Reward()
                stored.CopyFrom(reward)
                if not stored.reward_id:
                    stored.reward_id = new_id()
                if not stored.HasField("create_time"):
                    stored.create_time.FromNanoseconds(int(now * 1e9))
                rows.append(RewardRow(stored.reward_id, stored.session_id, stored.SerializeToString(), now))
        inserted = iter(self.backend.insert_rewards(rows) if rows else [])
        for position, result in enumerate(results):
            if isinstance(result, int):
                written = sum(next(inserted) for _ in range(result))
                results[position] = WriteResult(written, result - written)
        return results

    def _commit_closes(self, closes: list[SessionClose]) -> list[Any]:
        sessions = self.backend.get_sessions({close.session_id for close in closes})
        # Outcomes as they will be once earlier closes in this group commit.
        outcomes = {s.session_id: s.outcome for s in sessions.values() if s.state == SESSION_STATE_CLOSED}
        accepted: list[SessionClose] = []
        results: list[Any] = []
        for close in closes:
            outcome = outcomes.setdefault(close.session_id, close.outcome)
            if outcome != close.outcome:
                results.append(FailedPrecondition(
                    f"session {close.session_id!r} is already closed with outcome {outcome}, not {close.outcome}"
                ))  # fmt: skip
            else:
                results.append(None)
                accepted.append(close)
        closed = iter(self.backend.close_sessions(accepted, time.time()) if accepted else [])
        return [next(closed) if result is None else result for result in results]

    def _commit_metadata(self, requests: list[list[MetadataUpdate]]) -> list[Any]:
        known = self.backend.get_sessions({u.session_id for updates in requests for u in updates}).keys()
        accepted: list[MetadataUpdate] = []
        results: list[Any] = []
        for updates in requests:
            missing = sorted({u.session_id for u in updates} - known)
            if missing:
                results.append(NotFound(f"unknown session(s): {', '.join(missing)}"))
            else:
                results.append(updates)
                accepted += updates
        changed = self.backend.update_session_metadata(accepted) if accepted else set()
        return [
            result if isinstance(result, Exception) else len({u.session_id for u in result} & changed)
            for result in results
        ]

    def _commit_delete(self, session_ids: list[str], updated_before: float | None) -> tuple[int, int]:
        deleted = self.backend.delete_sessions(session_ids, updated_before)
        # Deleted sessions may come back under the same id; never splice against a deleted call.
        self._tails = _LruCache(self._tails.capacity)
        with self._recent_lock:
            self._recent = _LruCache(self._recent.capacity)
        return deleted

    # Reads.
    # Each read runs in one backend snapshot, with the reference rows its calls splice
    # against: a delete committing halfway through cannot leave a reference missing.
    async def get_call(self, call_id: str, full: bool) -> llm_call_pb2.LlmCall:
        validation.check_required_id(call_id, "call_id")

        def read() -> list[llm_call_pb2.LlmCall]:
            with self._snapshot() as cache:
                rows = list(self.backend.get_call_rows([call_id]).values())
                references = self._references(rows, cache) if full else None
            return self._render(rows, references)

        calls = await asyncio.to_thread(read)
        if not calls:
            raise NotFound(f"call {call_id!r} does not exist")
        return calls[0]

    async def list_calls(
        self, session_id: str, page_size: int, page_token: str, full: bool
    ) -> tuple[list[llm_call_pb2.LlmCall], str]:
        def read() -> tuple[list[llm_call_pb2.LlmCall], str]:
            with self._snapshot() as cache:
                rows, next_token = self._session_page(
                    "calls", session_id, page_size, page_token, self.backend.list_call_rows, lambda row: row.seq
                )
                references = self._references(rows, cache) if full else None
            return self._render(rows, references), next_token

        return await asyncio.to_thread(read)

    async def watch_calls(
        self, cursor: str, full: bool, max_batch_size: int, from_latest: bool = False
    ) -> AsyncIterator[tuple[list[llm_call_pb2.LlmCall], str]]:
        """Yields (calls, cursor after them); an empty list is a heartbeat. `from_latest`
        with no cursor starts after the latest call stored now."""
        seq = decode_cursor(cursor, self.backend.store_id)
        if from_latest and not cursor:
            seq = await asyncio.to_thread(self.backend.latest_call_seq)
        limit = page_tokens.page_size(max_batch_size)

        def read(after: int) -> tuple[list[CallRow], list[llm_call_pb2.LlmCall]]:
            with self._snapshot() as cache:
                rows = self.backend.call_rows_after(after, limit)
                references = self._references(rows, cache) if full else None
            return rows, self._render(rows, references)

        last_sent = time.monotonic()
        while not self._draining:
            committed = self._committed
            rows, calls = await asyncio.to_thread(read, seq)
            if rows:
                seq = rows[-1].seq
                yield calls, encode_cursor(self.backend.store_id, seq)
                last_sent = time.monotonic()
                continue
            # Due only after a read found nothing: a commit that woke the wait is read first.
            if time.monotonic() - last_sent >= self.watch_heartbeat_s:
                yield [], encode_cursor(self.backend.store_id, seq)
                last_sent = time.monotonic()
            # Woken by this process's commits; the poll catches other writers sharing the database.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(committed.wait(), timeout=self.watch_poll_s)

    async def watch_closed_sessions(
        self, cursor: str, max_batch_size: int
    ) -> AsyncIterator[tuple[list[SessionRow], str]]:
        """Yields (sessions closed after the cursor, in close order; cursor after them);
        an empty list is a heartbeat."""
        close_seq = decode_cursor(cursor, self.backend.store_id, "closes")
        limit = page_tokens.page_size(max_batch_size)
        last_sent = time.monotonic()
        full_page = False
        while not self._draining:
            committed = self._committed
            rows = await asyncio.to_thread(self.backend.sessions_closed_after, close_seq, limit)
            if rows or full_page:
                # A message shorter than max_batch_size tells the reader it has caught
                # up; after a full page with nothing behind it, that is an empty one.
                full_page = len(rows) == limit
                close_seq = rows[-1].close_seq if rows else close_seq
                yield rows, encode_cursor(self.backend.store_id, close_seq, "closes")
                last_sent = time.monotonic()
                continue
            if time.monotonic() - last_sent >= self.watch_heartbeat_s:
                yield [], encode_cursor(self.backend.store_id, close_seq, "closes")
                last_sent = time.monotonic()
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

        def read() -> tuple[dict[str, SessionRow], list[CallRow], list[RewardRow], list[llm_call_pb2.LlmCall]]:
            with self._snapshot() as cache:
                sessions = self.backend.get_sessions(wanted)
                call_rows = self.backend.session_call_rows(sessions)
                reward_rows = self.backend.session_reward_rows(sessions)
                references = self._references(call_rows, cache) if view == "full" else None
            # The spliced view is built from the rows as they are stored.
            calls = [] if view == "spliced" else self._render(call_rows, references)
            return sessions, call_rows, reward_rows, calls

        sessions, call_rows, reward_rows, calls = await asyncio.to_thread(read)
        contents = {sid: SessionContents(sessions[sid], [], []) for sid in wanted if sid in sessions}
        if view == "spliced":
            for row in call_rows:
                call, splice = call_codec.spliced_view(row)
                contents[call.session_id].calls.append(call)
                if splice is not None:
                    contents[call.session_id].splices.append(PromptSplice(*splice))
        else:
            for call in calls:
                contents[call.session_id].calls.append(call)
        for row in reward_rows:
            contents[row.session_id].rewards.append(reward_pb2.Reward.FromString(row.body))
        return list(contents.values()), [sid for sid in wanted if sid not in sessions]

    async def list_rewards(self, session_id: str, page_size: int, page_token: str) -> tuple[list[reward_pb2.Reward], str]:
        def read() -> tuple[list[RewardRow], str]:
            with self.backend.snapshot():
                return self._session_page(
                    "rewards", session_id, page_size, page_token, self.backend.list_reward_rows, lambda row: row.key
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

    async def list_sessions(self, query: SessionQuery, page_size: int, page_token: str) -> tuple[list[SessionRow], str]:
        validation.check_id(query.parent_session_id or "", "parent_session_id")
        validation.check_id(query.session_id_prefix, "session_id_prefix")
        validation.check_metadata(dict(query.metadata), "metadata")
        scope = query.scope()
        position = decode_page_token(page_token, scope)
        limit = page_tokens.page_size(page_size)
        rows = await asyncio.to_thread(self.backend.list_sessions, query, position, limit + 1)
        next_token = encode_page_token(scope, rows[limit - 1].key) if len(rows) > limit else ""
        return rows[:limit], next_token

    async def stats(self) -> BackendStats:
        return await asyncio.to_thread(self.backend.stats)

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[_LruCache]:
        """A backend snapshot, and the decoded-call cache to use with it: the one from
        before the snapshot began. A delete committing meanwhile replaces the store's
        cache, so calls decoded here from rows it removed stay out of the new one, where
        a call written later under the same id would read them."""
        cache = self._recent
        with self.backend.snapshot():
            yield cache

    def _references(self, rows: list[CallRow], cache: _LruCache) -> _References:
        """Fetches the reference chains `rows` need; inside the snapshot `rows` came from."""
        known: dict[str, CallRow] = {row.call_id: row for row in rows}
        tokens: dict[str, CallTokens] = {}
        with self._recent_lock:
            for row in rows:
                # Only references outside `rows`: every row itself is decoded below.
                if (
                    row.ref_call_id
                    and row.ref_call_id not in known
                    and (cached := cache.get(row.ref_call_id)) is not None
                ):
                    tokens[row.ref_call_id] = cached
        # Computed once: a union inside the comprehension would rebuild it per row.
        have = known.keys() | tokens.keys()
        missing = {r.ref_call_id for r in rows if r.ref_call_id and r.ref_call_id not in have}
        while missing:
            fetched = self.backend.get_call_rows(missing)
            if len(fetched) != len(missing):
                lost = sorted(missing - fetched.keys())
                raise RuntimeError(f"store is inconsistent: referenced calls {lost} are missing")
            known.update(fetched)
            missing = {
                r.ref_call_id for r in fetched.values()
                if r.ref_call_id and r.ref_call_id not in known and r.ref_call_id not in tokens
            }  # fmt: skip
        return _References(known, tokens, cache)

    def _render(self, rows: list[CallRow], references: _References | None) -> list[llm_call_pb2.LlmCall]:
        """The basic view of `rows` without references; full calls, decoded, with them."""
        if references is None:
            return [call_codec.basic_view(row) for row in rows]
        known, tokens = references.rows, references.tokens
        decoded: dict[str, llm_call_pb2.LlmCall] = {}

        def decode(call_id: str) -> None:
            # Iterative: walk up to the first decoded (or full) ancestor, then back down.
            chain = [known[call_id]]
            while (ref_id := chain[-1].ref_call_id) and ref_id not in tokens:
                chain.append(known[ref_id])
            for link in reversed(chain):
                if link.call_id not in tokens:
                    call = call_codec.decode_call(link, tokens.get(link.ref_call_id or ""))
                    decoded[link.call_id] = call
                    tokens[link.call_id] = CallTokens.of(call, link.ref_depth)

        for row in rows:
            if row.call_id not in decoded:
                decode(row.call_id)
        with self._recent_lock:
            for row in rows:
                references.cache.put(row.call_id, tokens[row.call_id])
        return [decoded[row.call_id] for row in rows]


def _settle(job: _Job, result: Any) -> None:
    """Answer the job's caller, unless it has stopped waiting: a cancelled request
    (deadline, client cancel, shutdown) still commits, but its future is done."""
    if job.future.done():
        return
    if isinstance(result, Exception):
        job.future.set_exception(result)
    else:
        job.future.set_result(result)


def _check_reward_targets(
    rewards: Sequence[reward_pb2.Reward], known_sessions: Any, step_calls: dict[str, CallRow]
) -> None:
    """Every reward scores an existing session, and a step reward a call of that session."""
    missing = sorted({r.session_id for r in rewards} - set(known_sessions))
    if missing:
        raise NotFound(f"unknown session(s): {', '.join(missing)}")
    for reward in rewards:
        if reward.WhichOneof("step") != "call_id":
            continue
        row = step_calls.get(reward.call_id)
        if row is None:
            raise NotFound(f"reward {reward.reward_id!r} scores unknown call {reward.call_id!r}")
        if row.session_id != reward.session_id:
            raise InvalidArgument(
                f"reward {reward.reward_id!r}: call {reward.call_id!r} belongs to session "
                f"{row.session_id!r}, not {reward.session_id!r}"
            )

"""Gets every captured call into the token store, or into the local spool, in capture order.

One task does all the moving, so order is simple to keep: while anything is in the
spool, new calls join the spool behind it, and the spool drains oldest first once
the store answers again. The store deduplicates by call id, so a batch that timed
out here but committed there is harmless when it is replayed.

Batches go over one long-lived StreamWriteCalls stream, one at a time: a unary
WriteCalls per batch costs the store (and ingest) more CPU than a message on an open
stream, and with a batch or two in flight per store commit that cost sits on every
agent's wait (measurements: docs/design/store-write-stream.md). A stream that fails or
goes quiet is dropped, and the next batch opens a new one.

Durability "before" (the default) resolves a call's future once the store or the
spool holds it, and the agent's response waits for that; "after" answers the agent
first and loses at most the calls still in memory if ingest itself crashes.

`flush()` waits until every call captured so far is in the store: the barrier an
agent passes before it reports a reward or closes a session, which the store would
refuse, or assemble without some calls, if they had not arrived yet.

A batch the store refuses as invalid (rather than failing to answer) is split until
the refused calls are alone; they go to the spool's `refused` table and the rest to
the store, so one bad call never holds up the calls behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import Literal, NoReturn

import grpc
import structlog

from parity.api.common.v1 import llm_call_pb2
from parity.clients import AsyncStoreClient, RPCError
from parity.clients.store_writes import CallWriteStream, StreamEnded
from parity.services.ingest import openai_errors
from parity.services.ingest.capture.spool import Spool, batch_length

log = structlog.get_logger(__name__)

Durability = Literal["before", "after"]
# Well under any store's message limit, however large single calls are.
MAX_BATCH_BYTES = 16 << 20
# The store answered and said no: sending the same calls again cannot succeed.
_REFUSALS = frozenset({
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE,
})  # fmt: skip


class _StoreUnreachable(Exception):
    """The store did not answer (down, slow, or unreachable); the calls may be retried."""


class CaptureSink:
    def __init__(
        self,
        store_address: str,
        spool: Spool,
        *,
        durability: Durability = "before",
        batch_size: int = 256,
        max_pending: int = 8192,
        store_timeout_s: float = 5.0,
        retry_interval_s: float = 1.0,
    ) -> None:
        self.store_address = store_address
        self.spool = spool
        self.durability = durability
        self.batch_size = batch_size
        self.max_pending = max_pending
        self.store_timeout_s = store_timeout_s
        self.retry_interval_s = retry_interval_s
        self.captured = 0
        self.stored = 0
        # Calls taken from memory, in capture order, and stored, refused or spooled.
        self._moved = 0
        self._progress = asyncio.Event()
        self.store_reachable = True
        self._pending: deque[tuple[bytes, asyncio.Future[None] | None]] = deque()
        self._wakeup = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._next_replay = 0.0
        self._write_error: str | None = None
        self._stopping = False
        self._store = AsyncStoreClient(store_address)
        self._writer: CallWriteStream | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def queue_depth(self) -> int:
        return len(self._pending)

    async def start(self) -> None:
        self._writer = self._store.call_writer()
        self._task = asyncio.create_task(self._run(), name="capture-sink")

    async def stop(self) -> None:
        """Put everything still in memory into the store or the spool, then close."""
        if self._task is not None:
            # The task drains what is pending and returns; cancelling it could drop a
            # batch it has taken but not yet stored.
            self._stopping = True
            self._wakeup.set()
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 2 * self.store_timeout_s)
            except TimeoutError:
                log.error(
                    "calls_lost_on_stop", calls=len(self._pending), spool_error=self._write_error
                )
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
        if self._writer is not None:
            await self._writer.finish(self.store_timeout_s)
        await self._store.close()
        await asyncio.to_thread(self.spool.close)

    def check_accepting(self) -> None:
        """Refuse new work (503) while no call could be kept; never drop silently."""
        if self.spool.full:
            raise openai_errors.unavailable(
                f"capture spool is full ({self.spool.bytes >> 20} MiB of {self.spool.max_bytes >> 20} MiB) "
                f"because the token store at {self.store_address} is unreachable; retry later"
            )
        if self._write_error is not None and not self.store_reachable:
            raise openai_errors.unavailable(
                f"the token store at {self.store_address} is unreachable and the capture spool "
                f"{self.spool.path} cannot be written ({self._write_error}); retry later"
            )

    async def submit(self, call: llm_call_pb2.LlmCall) -> None:
        """Queue a call; with durability "before", return once the store or spool holds it."""
        while len(self._pending) >= self.max_pending:
            self._room.clear()
            await self._room.wait()
        future = asyncio.get_running_loop().create_future() if self.durability == "before" else None
        self._pending.append((call.SerializeToString(), future))
        self.captured += 1
        self._wakeup.set()
        if future is not None:
            await future

    def submit_nowait(self, call: llm_call_pb2.LlmCall) -> None:
        """Queue a call that nothing waits on: one whose agent went away mid-stream. It
        may pass `max_pending` by the streams closing at that moment, rather than be lost."""
        self._pending.append((call.SerializeToString(), None))
        self.captured += 1
        self._wakeup.set()

    async def flush(self, timeout_s: float) -> int:
        """Wait until every call captured so far is in the store (or set aside as refused
        by it); returns how many calls were captured. An UNAVAILABLE HttpError if that
        takes longer than `timeout_s`."""
        through = self.captured
        deadline = time.monotonic() + timeout_s
        # The sink moves calls in capture order and the spool drains before anything
        # newer, so once `through` calls have left memory and the spool is empty, every
        # one of them has reached the store.
        while self._moved < through or self.spool.count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                where = (
                    f"{self.spool.count} calls wait in the spool while the token store at {self.store_address} is unreachable"
                    if self.spool.count
                    else f"they are still on their way to the token store at {self.store_address}"
                )
                raise openai_errors.unavailable(
                    f"the calls captured before this flush are not all stored after {timeout_s:g} s: {where}; retry later"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), remaining)
        return through

    def _notify_progress(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    async def _run(self) -> None:
        while not (self._stopping and not self._pending):
            if not (self._pending or self._stopping):
                if self.spool.count:
                    # Calls left from before (a store outage, or a previous run): retry on a timer.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(
                            self._wakeup.wait(), max(0.0, self._next_replay - time.monotonic())
                        )
                else:
                    await self._wakeup.wait()
            self._wakeup.clear()
            try:
                while self._pending or self._replay_due():
                    if self._replay_due():
                        await self._replay_spool()
                    if self._pending:
                        await self._move_pending()
            except Exception as error:  # noqa: BLE001 - the sink must outlive any one failure
                # Usually the disk under the spool (full, or an I/O error). The calls stay
                # in memory, and new requests are refused while the store is down too.
                if self._write_error is None:
                    log.error("capture_write_failed", spool=str(self.spool.path), exc_info=error)
                self._write_error = str(error)
                await asyncio.sleep(self.retry_interval_s)

    def _replay_due(self) -> bool:
        return (
            bool(self.spool.count) and not self._stopping and time.monotonic() >= self._next_replay
        )

    async def _move_pending(self) -> None:
        count = batch_length(
            (len(call) for call, _ in self._pending), self.batch_size, MAX_BATCH_BYTES
        )
        batch = [self._pending.popleft() for _ in range(count)]
        unsent = [serialized for serialized, _ in batch]
        try:
            # Behind the spool, or straight to the store if the spool is empty.
            if not self.spool.count:
                unsent = await self._deliver(unsent)
            if unsent:
                await asyncio.to_thread(self.spool.append, unsent)
                unsent = []
        except Exception as error:
            # What is neither stored nor spooled stays queued, in order, and its agents
            # still waiting hear a 503; the calls before it are kept and answered.
            self._pending.extendleft((call, None) for call in reversed(unsent))
            failure = openai_errors.unavailable(f"captured call could not be made durable: {error}")
            self._settle(batch, len(batch) - len(unsent), failure)
            raise
        self._write_error = None
        self._settle(batch, len(batch), None)

    def _settle(
        self,
        batch: list[tuple[bytes, asyncio.Future[None] | None]],
        kept: int,
        failure: Exception | None,
    ) -> None:
        """Answer the agents waiting on `batch`: the first `kept` calls are durable."""
        self._moved += kept
        self._notify_progress()
        for position, (_, future) in enumerate(batch):
            if future is None or future.done():
                continue
            if position < kept:
                future.set_result(None)
            elif failure is not None:
                future.set_exception(failure)
        if len(self._pending) < self.max_pending:
            self._room.set()

    async def _replay_spool(self) -> None:
        while self.spool.count:
            rows = await asyncio.to_thread(self.spool.oldest, self.batch_size, MAX_BATCH_BYTES)
            unsent = await self._deliver([call for _, call in rows])
            done = rows[: len(rows) - len(unsent)]
            if done:
                await asyncio.to_thread(
                    self.spool.remove_through, done[-1][0], sum(len(c) for _, c in done), len(done)
                )
                log.info("spool_replayed", calls=len(done), left=self.spool.count)
                self._notify_progress()
            if unsent:
                return

    async def _deliver(self, calls: list[bytes]) -> list[bytes]:
        """Store `calls`, setting aside any the store refuses. Returns the calls not
        delivered because the store stopped answering: a suffix of `calls`, in order."""
        try:
            refusal = await self._send(calls)
        except _StoreUnreachable:
            return calls
        if refusal is None:
            return []
        if len(calls) == 1:
            await asyncio.to_thread(self.spool.refuse, calls[0], refusal)
            call = llm_call_pb2.LlmCall.FromString(calls[0])
            log.error(
                "store_refused_call",
                call_id=call.call_id,
                session_id=call.session_id,
                reason=refusal,
            )
            return []
        middle = len(calls) // 2
        unsent = await self._deliver(calls[:middle])
        return unsent + calls[middle:] if unsent else await self._deliver(calls[middle:])

    async def _send(self, calls: list[bytes]) -> str | None:
        """None once the store holds the calls, else why it refused them."""
        assert self._writer is not None
        try:
            # asyncio.timeout rather than wait_for, which on Python 3.11 runs the write
            # in a task of its own: one more task and loop turn for every batch.
            async with asyncio.timeout(self.store_timeout_s):
                await self._writer.write(calls)
        except RPCError as error:
            if error.code in _REFUSALS:
                self.store_reachable = True
                return f"{error.code.name}: {error.message}"
            self._unreachable(error.code.name, error.message)
        except (TimeoutError, StreamEnded, asyncio.InvalidStateError) as error:
            self._writer.drop()
            self._unreachable(
                type(error).__name__, str(error) or f"no answer within {self.store_timeout_s} s"
            )
        if not self.store_reachable:
            log.info("store_reachable_again")
        self.store_reachable = True
        self.stored += len(calls)
        return None

    def _unreachable(self, code: str, details: str) -> NoReturn:
        if self.store_reachable:
            log.warning("store_unreachable_spooling", code=code, error=details)
        self.store_reachable = False
        self._next_replay = time.monotonic() + self.retry_interval_s
        raise _StoreUnreachable(details)

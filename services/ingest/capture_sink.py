"""Gets every captured call into the token store, or into the local spool, in capture order.

One task does all the moving, so order is simple to keep: while anything is in the
spool, new calls join the spool behind it, and the spool drains oldest first once
the store answers again. The store deduplicates by call id, so a batch that timed
out here but committed there is harmless when it is replayed.

Durability "before" (the default) resolves a call's future once the store or the
spool holds it, and the agent's response waits for that; "after" answers the agent
first and loses at most the calls still in memory if ingest itself crashes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import Literal

import grpc
import structlog

from parity.api.common.v1 import llm_call_pb2
from parity.services.ingest import openai_errors
from parity.services.ingest.spool import Spool

log = structlog.get_logger(__name__)

Durability = Literal["before", "after"]
WRITE_CALLS = "/parity.api.store.v1.TokenStoreService/WriteCalls"
_WRITE_CALLS_FIELD_TAG = b"\x0a"  # field 1 (calls), wire type 2 (length-delimited)


def encode_write_calls(serialized_calls: list[bytes]) -> bytes:
    """A serialized WriteCallsRequest built from already-serialized calls, without a copy
    through message objects. The same bytes go to the store and, on failure, the spool."""
    parts = []
    for call in serialized_calls:
        parts.append(_WRITE_CALLS_FIELD_TAG)
        parts.append(_varint(len(call)))
        parts.append(call)
    return b"".join(parts)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


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
        self.store_reachable = True
        self._pending: deque[tuple[bytes, asyncio.Future[None] | None]] = deque()
        self._wakeup = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._next_replay = 0.0
        self._channel: grpc.aio.Channel | None = None
        self._write: grpc.aio.UnaryUnaryMultiCallable | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def queue_depth(self) -> int:
        return len(self._pending)

    async def start(self) -> None:
        self._channel = grpc.aio.insecure_channel(
            self.store_address, options=[("grpc.max_send_message_length", 64 << 20)]
        )
        self._write = self._channel.unary_unary(WRITE_CALLS)
        self._task = asyncio.create_task(self._run(), name="capture-sink")

    async def stop(self) -> None:
        """Put everything still in memory into the store or the spool, then close."""
        if self._task is not None:
            while self._pending:
                await self._move_pending()
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._channel is not None:
            await self._channel.close()
        await asyncio.to_thread(self.spool.close)

    def check_accepting(self) -> None:
        """Refuse new work (503) once the spool's disk budget is spent; never drop silently."""
        if self.spool.full:
            raise openai_errors.unavailable(
                f"capture spool is full ({self.spool.bytes >> 20} MiB of {self.spool.max_bytes >> 20} MiB) "
                f"because the token store at {self.store_address} is unreachable; retry later"
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

    async def _run(self) -> None:
        while True:
            if self.spool.count:
                # Calls left from before (a store outage, or a previous run): retry on a timer.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), max(0.0, self._next_replay - time.monotonic()))
            else:
                await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending or (self.spool.count and time.monotonic() >= self._next_replay):
                if self.spool.count and time.monotonic() >= self._next_replay:
                    await self._replay_spool()
                if self._pending:
                    await self._move_pending()

    async def _move_pending(self) -> None:
        batch = [self._pending.popleft() for _ in range(min(self.batch_size, len(self._pending)))]
        calls = [serialized for serialized, _ in batch]
        # Behind the spool, or straight to the store if the spool is empty.
        if self.spool.count or not await self._send(calls):
            await asyncio.to_thread(self.spool.append, calls)
        for _, future in batch:
            if future is not None and not future.done():
                future.set_result(None)
        if len(self._pending) < self.max_pending:
            self._room.set()

    async def _replay_spool(self) -> None:
        while self.spool.count:
            rows = await asyncio.to_thread(self.spool.oldest, self.batch_size)
            if not await self._send([call for _, call in rows]):
                return
            await asyncio.to_thread(
                self.spool.remove_through, rows[-1][0], sum(len(c) for _, c in rows), len(rows)
            )
            log.info("spool_replayed", calls=len(rows), left=self.spool.count)

    async def _send(self, calls: list[bytes]) -> bool:
        assert self._write is not None
        try:
            await self._write(encode_write_calls(calls), timeout=self.store_timeout_s)
        except grpc.aio.AioRpcError as error:
            if self.store_reachable:
                log.warning("store_unreachable_spooling", code=error.code().name, error=error.details())
            self.store_reachable = False
            self._next_replay = time.monotonic() + self.retry_interval_s
            return False
        if not self.store_reachable:
            log.info("store_reachable_again")
        self.store_reachable = True
        self.stored += len(calls)
        return True

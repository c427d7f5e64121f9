"""What every asyncio client shares: its channel, deadlines, retries, RPCError.

The asyncio twin of parity.clients.base, for services and async agent code. A
client opens its channel on first use, inside the running event loop (gRPC's
asyncio channels belong to one loop), and `close()` releases it.

Retries take either a number of attempts (`retries`, as the sync clients) or a time
budget (`retry_for_s`: keep trying until it is spent, for a service that must ride
out a peer's restart), with jittered exponential backoff, on the codes in
`retry_codes`. Every failure surfaces as one parity.RPCError.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from typing import Any

import grpc

from parity.clients.base import MAX_MESSAGE_BYTES, RETRYABLE, default_timeout_s
from parity.clients.errors import RPCError
from parity.clients.transport import open_aio_channel

Options = Sequence[tuple[str, Any]]


class AsyncServiceClient:
    """Base of the generated asyncio clients."""

    def __init__(
        self,
        stub_class: Callable[[grpc.aio.Channel], Any],
        address: str,
        *,
        timeout_s: float | None = None,
        retries: int = 5,
        retry_for_s: float | None = None,
        retry_codes: Collection[grpc.StatusCode] = RETRYABLE,
        backoff_s: float = 0.1,
        max_backoff_s: float = 2.0,
        metadata: tuple[tuple[str, str], ...] = (),
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        options: Options = (),
    ) -> None:
        """`options`: gRPC channel arguments beyond the message size limits (keepalive, reconnect backoff)."""
        self.address = address
        self.timeout_s = timeout_s if timeout_s is not None else default_timeout_s()
        self.retries = retries
        self.retry_for_s = retry_for_s
        self.retry_codes = frozenset(retry_codes)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.metadata = metadata
        self._options = [("grpc.max_send_message_length", max_message_bytes),
                         ("grpc.max_receive_message_length", max_message_bytes), *options]  # fmt: skip
        self._stub_class = stub_class
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None

    @property
    def channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = open_aio_channel(self.address, self._options)
            self._stub = self._stub_class(self._channel)
        return self._channel

    @property
    def stub(self) -> Any:
        _ = self.channel
        return self._stub

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel, self._stub = self._channel, None, None
            await channel.close()

    async def _unary(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        call = getattr(self.stub, method)
        give_up_at = time.monotonic() + self.retry_for_s if self.retry_for_s is not None else None
        attempt = 0
        while True:
            try:
                return await call(
                    request, timeout=timeout_s or self.timeout_s, metadata=self.metadata or None
                )
            except grpc.aio.AioRpcError as error:
                # Full jitter, so many clients waiting on one restarting service spread out.
                pause = random.uniform(0, min(self.max_backoff_s, self.backoff_s * 2**attempt))
                if give_up_at is not None:
                    remaining = give_up_at - time.monotonic()
                    out_of_tries = remaining <= 0
                    pause = min(pause, remaining)
                else:
                    out_of_tries = attempt == self.retries
                if error.code() not in self.retry_codes or out_of_tries:
                    raise RPCError.from_grpc(error, method) from None
            attempt += 1
            await asyncio.sleep(pause)

    async def _stream(
        self, method: str, request: Any, timeout_s: float | None = None
    ) -> AsyncIterator[Any]:
        """A server stream with errors as RPCError. Not retried: resume from your cursor.
        `timeout_s` bounds the whole stream (DEADLINE_EXCEEDED past it); None: no deadline."""
        try:
            async for response in getattr(self.stub, method)(
                request, timeout=timeout_s, metadata=self.metadata or None
            ):
                yield response
        except grpc.aio.AioRpcError as error:
            raise RPCError.from_grpc(error, method) from None

"""The store's asyncio client, with the write path ingest's capture uses: calls that are already
serialized, sent over one long-lived StreamWriteCalls stream.

A StreamWriteCallsRequest holds nothing but its repeated `calls` (field 1), so a
request is the calls' own bytes, each framed as that field: built without parsing them
back into messages. The store's answer is left unparsed too; it carries nothing the
writer needs beyond having come. One batch is in flight at a time.
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc

from parity.clients.errors import RPCError
from parity.clients.generated.store import AsyncTokenStoreClient

STREAM_WRITE_CALLS = "/parity.api.store.v1.TokenStoreService/StreamWriteCalls"
_CALLS_FIELD_TAG = b"\x0a"  # field 1 (calls), wire type 2 (length-delimited)


class StreamEnded(Exception):
    """The store closed the write stream without an error, before answering a batch."""


def encode_write_calls(serialized_calls: list[bytes]) -> bytes:
    """A serialized StreamWriteCallsRequest (or WriteCallsRequest: the same fields) built
    from already-serialized calls, without a copy through message objects."""
    parts = []
    for call in serialized_calls:
        parts.append(_CALLS_FIELD_TAG)
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


class CallWriteStream:
    """One StreamWriteCalls stream, opened on the first write and again after it ends or is dropped."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._open: grpc.aio.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(
            STREAM_WRITE_CALLS
        )
        self._call: grpc.aio.StreamStreamCall | None = None

    async def write(self, serialized_calls: list[bytes]) -> None:
        """Once the store holds the calls. Raises RPCError, StreamEnded, or asyncio.InvalidStateError when the
        stream ended while being written; the stream is dropped on any of them."""
        if self._call is not None and self._call.done():
            # Ended by the store since the last batch (it shut down, and may be back).
            self._call = None
        if self._call is None:
            self._call = self._open()
        try:
            await self._call.write(encode_write_calls(serialized_calls))
            if await self._call.read() is grpc.aio.EOF:
                raise StreamEnded("the store ended the write stream without answering")
        except grpc.aio.AioRpcError as error:
            self.drop()
            raise RPCError.from_grpc(error, "StreamWriteCalls") from None
        except (StreamEnded, asyncio.InvalidStateError, asyncio.CancelledError):
            self.drop()
            raise

    async def finish(self, timeout_s: float) -> None:
        """End the stream from this side, so the store logs it as finished, not cancelled."""
        call, self._call = self._call, None
        if call is None:
            return
        with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError, TimeoutError):
            await asyncio.wait_for(call.done_writing(), timeout_s)
            await asyncio.wait_for(call.code(), timeout_s)

    def drop(self) -> None:
        """Cancel the stream; the next write opens a new one."""
        if self._call is not None:
            self._call.cancel()
            self._call = None


class AsyncStoreClient(AsyncTokenStoreClient):
    def call_writer(self) -> CallWriteStream:
        """A stream for serialized calls (ingest's capture path), on this client's channel."""
        return CallWriteStream(self.channel)

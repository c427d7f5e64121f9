"""What every typed client shares: one channel per address, deadlines, retries, RPCError."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

import grpc

from parity.clients.errors import RPCError
from parity.clients.transport import ChannelSecurity, open_channel, process_security

Response = TypeVar("Response")

# Retried: the service is restarting or not up yet. Anything else is the caller's to see.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE})
MAX_MESSAGE_BYTES = 64 << 20
DEFAULT_TIMEOUT_S = 30.0
_default_timeout_s = DEFAULT_TIMEOUT_S
_channels: dict[tuple[str, ChannelSecurity, int], grpc.Channel] = {}
_channels_lock = threading.Lock()


def shared_channel(address: str, max_message_bytes: int = MAX_MESSAGE_BYTES) -> grpc.Channel:
    """One channel per address (and token, and message limit) for the whole process: gRPC channels are meant to be
    reused."""
    security = process_security()
    with _channels_lock:
        channel = _channels.get((address, security, max_message_bytes))
        if channel is None:
            channel = _channels[address, security, max_message_bytes] = open_channel(
                address,
                [("grpc.max_send_message_length", max_message_bytes),
                 ("grpc.max_receive_message_length", max_message_bytes)],
                security,
            )  # fmt: skip
        return channel


def default_timeout_s() -> float:
    """The deadline of each unary call of a client made without `timeout_s`."""
    return _default_timeout_s


def set_default_timeout_s(seconds: float) -> None:
    """Change it for clients made from now on (`parity.configure(rpc_timeout_s=...)` does this)."""
    global _default_timeout_s
    _default_timeout_s = seconds


class StreamCall(Generic[Response]):
    """A bidirectional stream in progress: iterate its responses (errors as RPCError) in one thread, and `cancel()`
    it from any other, which a generator cannot offer."""

    def __init__(self, call: Any, method: str) -> None:
        self._call = call
        self._method = method

    def __iter__(self) -> Iterator[Response]:
        try:
            yield from self._call
        except grpc.RpcError as error:
            raise RPCError.from_grpc(error, self._method) from None

    def cancel(self) -> None:
        self._call.cancel()


class ServiceClient:
    """Base of the typed clients. Unary calls get a deadline and retries on UNAVAILABLE."""

    def __init__(
        self,
        stub_class: Callable[[grpc.Channel], Any],
        address: str,
        *,
        timeout_s: float | None = None,
        retries: int = 5,
        backoff_s: float = 0.1,
        metadata: tuple[tuple[str, str], ...] = (),
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s if timeout_s is not None else default_timeout_s()
        self.retries = retries
        self.backoff_s = backoff_s
        self.metadata = metadata
        self._stub = stub_class(shared_channel(address, max_message_bytes))

    def _unary(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        call = getattr(self._stub, method)
        for attempt in range(self.retries + 1):
            try:
                return call(
                    request, timeout=timeout_s or self.timeout_s, metadata=self.metadata or None
                )
            except grpc.RpcError as error:
                if error.code() not in RETRYABLE or attempt == self.retries:
                    raise RPCError.from_grpc(error, method) from None
                # Full jitter, so many clients waiting on one restarting service spread out.
                time.sleep(random.uniform(0, min(2.0, self.backoff_s * 2**attempt)))
        raise AssertionError("unreachable")

    def _stream(self, method: str, request: Any, timeout_s: float | None = None) -> Iterator[Any]:
        """A server stream with errors as RPCError. Not retried: resume from your cursor.
        `timeout_s` bounds the whole stream (DEADLINE_EXCEEDED past it); None: no deadline."""
        try:
            yield from getattr(self._stub, method)(
                request, timeout=timeout_s, metadata=self.metadata or None
            )
        except grpc.RpcError as error:
            raise RPCError.from_grpc(error, method) from None

    def _bidi(
        self, method: str, requests: Iterable[Any], timeout_s: float | None = None
    ) -> StreamCall[Any]:
        """A bidirectional stream fed by `requests` (gRPC reads it in a thread of its own). Not retried: the caller
        knows what to send again. `timeout_s` bounds the whole stream; None: no deadline."""
        return StreamCall(
            getattr(self._stub, method)(
                requests, timeout=timeout_s, metadata=self.metadata or None
            ),
            method,
        )

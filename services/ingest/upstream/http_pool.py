"""HTTP/1.1 to the replicas: pooled keep-alive connections, parsed by httptools.

Ingest makes one upstream request for every request it serves, so the client's cost
is paid on every call. aiohttp's client spent 90 to 150 µs of CPU per request here
(URL objects, header multidicts, payload registries, tracing hooks); this client
does only what a JSON POST to a replica needs.

- Idle connections are reused newest first and dropped after `keepalive_s`, or as
  soon as the replica closes them.
- A reused connection that breaks before any byte of the answer arrived is a race
  with the replica closing it as idle: the request is sent once more, on a fresh
  connection, and the replica is not blamed.
- The body of an answer is read as it arrives; a stream that the caller reads more
  slowly than the replica writes pauses the socket rather than buffering without
  bound.
- Between any two reads the wait is bounded by `read_timeout_s` (TimeoutError), ending
  up to a tenth of it later (at most a second): one sweep bounds every wait (ReadDeadlines).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools

# A stream buffered past this is paused at the socket until the reader has taken it all.
_PAUSE_BYTES = 1 << 20


class UpstreamAbandoned(Exception):
    """The answer's reader gave up on it (its agent went away) while waiting for more."""


class UpstreamConnectionError(Exception):
    """The connection failed, or broke before the whole answer arrived."""


class UpstreamConnectTimeout(UpstreamConnectionError):
    """The replica did not accept a connection in time."""


@dataclass(frozen=True)
class Origin:
    """Where a replica's base URL points: one pool of connections each."""

    host: str
    port: int
    tls: bool
    path_prefix: str

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @classmethod
    def parse(cls, base_url: str) -> Origin:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"an upstream URL must be http:// or https:// with a host, got {base_url!r}"
            )
        tls = parts.scheme == "https"
        return cls(parts.hostname, parts.port or (443 if tls else 80), tls, parts.path.rstrip("/"))


class ReadDeadlines:
    """Bounds waits on replicas by one sweep every tick rather than a timer per wait.

    Ingest waits on a replica once or twice per call, and asyncio.timeout costs 3 µs per
    wait of the 0.2 ms of CPU a call costs ingest (docs/design/ingest-mixed-load.md). A
    wait ends with TimeoutError between `timeout_s` and `timeout_s` plus a tick after
    it began; the sweep is scheduled only while something waits.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.tick_s = min(1.0, timeout_s / 10)
        self._waiting: dict[asyncio.Future[None], float] = {}
        self._sweep_at: asyncio.TimerHandle | None = None

    async def wait(self, future: asyncio.Future[None]) -> None:
        loop = future.get_loop()
        self._waiting[future] = loop.time() + self.timeout_s
        if self._sweep_at is None:
            self._sweep_at = loop.call_later(self.tick_s, self._sweep, loop)
        try:
            await future
        finally:
            del self._waiting[future]

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        # Safe to iterate: set_exception schedules the waiters' wake-ups, it does not run them.
        for future, deadline in self._waiting.items():
            if deadline <= now and not future.done():
                future.set_exception(TimeoutError())
        self._sweep_at = loop.call_later(self.tick_s, self._sweep, loop) if self._waiting else None


class UpstreamResponse:
    """One answer, read from its connection; `release()` once done with it."""

    def __init__(self, connection: _Connection) -> None:
        self.status = 0
        self._connection = connection
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._complete = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._released = False

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.iter_chunks()])

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, in whatever pieces the network delivers."""
        deadlines = self._connection.pool.deadlines
        while True:
            if self._chunks:
                data = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
                self._chunks.clear()
                self._buffered = 0
                self._connection.resume_reading()
                yield data
                continue
            if self._error is not None:
                raise self._error
            if self._complete:
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await deadlines.wait(self._waiter)
            finally:
                self._waiter = None

    def abandon(self) -> None:
        """Stop the answer now, wherever it is: a read waiting for more raises
        UpstreamAbandoned, and the connection closes, which tells the replica to stop."""
        if self._complete or self._error is not None:
            # Nothing more will come; its reader finishes it and releases it as usual.
            return
        self._end(UpstreamAbandoned())
        self.release()

    def release(self) -> None:
        """Give the connection back for reuse if the answer was read to its end and the
        replica keeps it alive; otherwise close it. Idempotent."""
        if self._released:
            return
        self._released = True
        self._connection.finish(reusable=self._complete and self._error is None)

    # Fed by the connection.
    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _PAUSE_BYTES:
            self._connection.pause_reading()
        self._wake()

    def _end(self, error: BaseException | None) -> None:
        if self._complete or self._error is not None:
            return
        if error is None:
            self._complete = True
        else:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class _Connection(asyncio.Protocol):
    """One keep-alive connection; carries one request at a time."""

    def __init__(self, pool: UpstreamPool, origin: Origin) -> None:
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._response: UpstreamResponse | None = None
        self._headers: asyncio.Future[None] | None = None
        # Whether the current request got any answer: one that got none, on a reused
        # connection, can be sent again.
        self.got_bytes = False
        self._paused = False
        # An answer with neither a length nor chunks ends when the connection does.
        self._length_known = False
        self._until_eof = False
        # Read when the answer completes: the parser forgets it once the next begins.
        self._keep_alive = False

    async def request(self, head: bytes, body: bytes) -> UpstreamResponse:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        response = self._response = UpstreamResponse(self)
        self._headers = loop.create_future()
        self.got_bytes = self._length_known = self._until_eof = self._keep_alive = False
        try:
            self.transport.writelines((head, body))
            await self.pool.deadlines.wait(self._headers)
        except BaseException:
            # The replica may still answer; nothing else can use this connection. Nobody
            # waits on this answer any more, so the close need not report to it.
            self._response = self._headers = None
            self.close()
            raise
        return response

    def finish(self, reusable: bool) -> None:
        self._response = None
        self._headers = None
        if reusable and self._keep_alive and not self.closed:
            self.resume_reading()
            self.pool.put_back(self)
        else:
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def pause_reading(self) -> None:
        if not self._paused and self.transport is not None and not self.closed:
            self._paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()

    # asyncio.Protocol.
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        if self._response is None:
            # Nothing was asked: a replica that talks out of turn is not one to reuse.
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(
                UpstreamConnectionError(
                    f"malformed HTTP answer from {self.origin.host}:{self.origin.port}: {error}"
                )
            )
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._until_eof and exc is None and self._response is not None:
            self._response._end(None)
            return
        reason = f": {exc!r}" if exc is not None else ""
        self._fail(
            UpstreamConnectionError(
                f"{self.origin.host}:{self.origin.port} closed the connection{reason}"
            )
        )

    def _fail(self, error: UpstreamConnectionError) -> None:
        if self._headers is not None and not self._headers.done():
            self._headers.set_exception(error)
        if self._response is not None:
            self._response._end(error)

    # httptools callbacks.
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._length_known = True

    def on_headers_complete(self) -> None:
        assert self._response is not None and self._headers is not None
        status = self._response.status = self._parser.get_status_code()
        self._until_eof = not self._length_known and status not in (204, 304)
        if not self._headers.done():
            self._headers.set_result(None)

    def on_body(self, body: bytes) -> None:
        assert self._response is not None
        self._response._feed(body)

    def on_message_complete(self) -> None:
        assert self._response is not None
        self._keep_alive = not self._until_eof and self._parser.should_keep_alive()
        self._response._end(None)


class UpstreamPool:
    """Keep-alive connections to every replica, opened on demand."""

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        keepalive_s: float = 60.0,
        api_key: str = "",
    ) -> None:
        # vLLM's --api-key (VLLM_API_KEY) guards its /v1 routes; ingest sends it on every request.
        self._authorization = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.deadlines = ReadDeadlines(read_timeout_s)
        self.keepalive_s = keepalive_s
        self._idle: dict[Origin, list[_Connection]] = {}
        self._origins: dict[str, Origin] = {}
        self._tls: ssl.SSLContext | None = None

    async def post(self, base_url: str, path: str, body: bytes) -> UpstreamResponse:
        """POST a JSON body; returns once the answer's headers are in.

        Raises UpstreamConnectTimeout, UpstreamConnectionError, or TimeoutError when
        the headers take longer than `read_timeout_s`."""
        origin = self._origins.get(base_url)
        if origin is None:
            origin = self._origins[base_url] = Origin.parse(base_url)
        head = (
            f"POST {origin.path_prefix}{path} HTTP/1.1\r\nHost: {origin.host_header}\r\n{self._authorization}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        connection = self._take_idle(origin)
        if connection is not None:
            try:
                return await connection.request(head, body)
            except UpstreamConnectionError:
                if connection.got_bytes:
                    raise
                connection.close()
        connection = await self._connect(origin)
        return await connection.request(head, body)

    async def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    def idle_connections(self) -> int:
        return sum(len(connections) for connections in self._idle.values())

    def _take_idle(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        expired_before = time.monotonic() - self.keepalive_s
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.idle_since > expired_before:
                return connection
            connection.close()
        return None

    def put_back(self, connection: _Connection) -> None:
        now = connection.idle_since = time.monotonic()
        idle = self._idle.setdefault(connection.origin, [])
        # The oldest idle connections are the first the replica closes or lets expire.
        while idle and (idle[0].closed or idle[0].idle_since <= now - self.keepalive_s):
            idle.pop(0).close()
        idle.append(connection)

    async def _connect(self, origin: Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        if origin.tls and self._tls is None:
            self._tls = ssl.create_default_context()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, connection = await loop.create_connection(
                    lambda: _Connection(self, origin), origin.host, origin.port,
                    ssl=self._tls if origin.tls else None,
                )  # fmt: skip
        except TimeoutError:
            raise UpstreamConnectTimeout(
                f"{origin.host}:{origin.port} did not accept a connection within {self.connect_timeout_s:g} s"
            ) from None
        except OSError as error:
            raise UpstreamConnectionError(
                f"cannot connect to {origin.host}:{origin.port}: {error}"
            ) from None
        return connection

"""The listening socket of ingest's HTTP server, accepting every waiting connection at once.

uvloop's libuv (1.45 and later) accepts one connection per turn of the event loop.
A loaded ingest turns its loop every few tens of milliseconds, so a burst of new
connections (a rollout starting its agents) was accepted a few per turn: 255 new
connections under load took about 2 s to drain from the accept queue, and their
first requests waited that long before ingest saw them. This listener accepts all
that are waiting, up to a bound, each time the socket is readable, as asyncio's own
loop does, and hands each socket to the loop's transport machinery.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)

# One turn takes at most this many, so a storm of connections cannot starve the
# requests already in flight; the rest wait for the next turn.
MAX_ACCEPTS_PER_TURN = 512
# Out of file descriptors (or kernel buffers): accepting again at once would only
# spin, so the listener pauses, as asyncio's loop does.
ACCEPT_RETRY_DELAY_S = 1.0
_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class HttpListener:
    """What uvicorn keeps in `Server.servers`: `close()` and `wait_closed()`."""

    def __init__(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.sock = sock
        self.protocol_factory = protocol_factory
        self.tls = tls
        self._loop = asyncio.get_running_loop()
        self._handshakes: set[asyncio.Task[object]] = set()
        self._closed = False
        self._loop.add_reader(sock.fileno(), self._accept_waiting)

    @classmethod
    def bind(
        cls,
        host: str,
        port: int,
        backlog: int,
        protocol_factory: Callable[[], asyncio.Protocol],
        tls: ssl.SSLContext | None = None,
        reuse_port: bool = False,
    ) -> HttpListener:
        """Listen on the first address `host` resolves to (an IP address resolves to itself). With `reuse_port`,
        other processes may listen on the same port (SO_REUSEPORT), and the kernel spreads new connections across
        all of them."""
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return cls(sock, protocol_factory, tls)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _accept_waiting(self) -> None:
        for _ in range(MAX_ACCEPTS_PER_TURN):
            try:
                connection, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as error:
                if error.errno not in _RESOURCE_ERRORS:
                    raise
                log.warning("http_accept_paused", error=str(error), retry_s=ACCEPT_RETRY_DELAY_S)
                self._loop.remove_reader(self.sock.fileno())
                self._loop.call_later(ACCEPT_RETRY_DELAY_S, self._resume)
                return
            connection.setblocking(False)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            handshake = self._loop.create_task(self._connect(connection))
            self._handshakes.add(handshake)
            handshake.add_done_callback(self._handshakes.discard)

    async def _connect(self, connection: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(
                self.protocol_factory, connection, ssl=self.tls
            )
        except (OSError, ssl.SSLError) as error:
            # The client left, or failed the TLS handshake, before its transport was made; nothing was read yet.
            log.debug("http_connection_dropped", error=str(error))
            connection.close()

    def _resume(self) -> None:
        if not self._closed:
            self._loop.add_reader(self.sock.fileno(), self._accept_waiting)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self.sock.fileno())
        self.sock.close()

    async def wait_closed(self) -> None:
        if self._handshakes:
            await asyncio.gather(*self._handshakes, return_exceptions=True)

"""A TCP relay a test can cut and restore: an upstream that dies and comes back, in front
of a real server, without starting a second one."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.conftest import free_port


class TcpRelay:
    """Forwards a local port to `target_port`; `cut()` closes the port and every open
    connection, as a replica that died would; `restore()` listens again on the same port.
    With `truncate_after` set, each connection is reset once that many bytes of answer
    have passed: an answer broken off midway, however far the reader lags behind. With
    `stall` set too, the connection stays open there and nothing more passes. With
    `hold_answers` set, a streamed answer passes in one write once its `[DONE]` has
    come, as from a server that fell behind and sends its merged outputs at once."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target_port = target_port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.truncate_after: int | None = None
        self.stall = False
        self.hold_answers = False
        self._cut = asyncio.Event()
        self._frozen: socket.socket | None = None
        self._fillers: list[socket.socket] = []
        self.accepted = 0
        """Connections taken so far."""

    def __enter__(self) -> TcpRelay:
        self._thread.start()
        self.restore()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()
        self._unfreeze()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def restore(self) -> None:
        self._unfreeze()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(5)

    def freeze(self) -> None:
        """Cut, then hold the port with a listener that never accepts and whose queue is
        full: new connections hang unanswered, as to a replica whose host froze."""
        self.cut()
        self._frozen = socket.socket()
        self._frozen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._frozen.bind(("127.0.0.1", self.port))
        self._frozen.listen(0)
        for _ in range(2):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", self.port))
            self._fillers.append(filler)

    def _unfreeze(self) -> None:
        for held in [*self._fillers, *([self._frozen] if self._frozen else [])]:
            held.close()
        self._fillers, self._frozen = [], None

    def cut(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(5)

    async def _listen(self) -> None:
        self._cut = asyncio.Event()
        self._server = await asyncio.start_server(
            self._relay, "127.0.0.1", self.port, reuse_address=True
        )

    async def _close(self) -> None:
        self._cut.set()
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            await self._server.wait_closed()
            self._server = None

    async def _relay(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        self.accepted += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", self.target_port
            )
        except OSError:
            client_writer.transport.abort()
            return
        self._writers |= {client_writer, upstream_writer}

        async def pipe(
            reader: asyncio.StreamReader,
            writer: asyncio.StreamWriter,
            limit: int | None,
            hold: bool = False,
        ) -> None:
            passed, held = 0, b""
            with contextlib.suppress(ConnectionError):
                while data := await reader.read(
                    1 << 16 if limit is None else min(1 << 16, limit - passed)
                ):
                    if hold:
                        held += data
                        if b"data: [DONE]" not in held:
                            continue
                        data, held = held, b""
                    writer.write(data)
                    await writer.drain()
                    passed += len(data)
                    if passed == limit:
                        if self.stall:
                            await self._cut.wait()
                        client_writer.transport.abort()
                        upstream_writer.transport.abort()
            writer.transport.abort()

        await asyncio.gather(
            pipe(client_reader, upstream_writer, None),
            pipe(upstream_reader, client_writer, self.truncate_after, self.hold_answers),
        )
        self._writers -= {client_writer, upstream_writer}


@pytest.fixture
def relay(vllm_server) -> Iterator[TcpRelay]:
    """The session's real vLLM behind a relay."""
    with TcpRelay(vllm_server.config.port) as running:
        yield running

"""Ingest's upstream HTTP client over real sockets: an aiohttp server where a real HTTP
server's behaviour is wanted, and scripted TCP servers for what a replica does wrong."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from parity.services.ingest.upstream import http_pool
from parity.services.ingest.upstream.http_pool import (
    Origin,
    UpstreamConnectionError,
    UpstreamPool,
)
from tests.conftest import free_port

pytestmark = pytest.mark.timeout(60)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    return head + await reader.readexactly(length)


def answer_and_close(answer: bytes) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()
        writer.close()

    return handler


async def scripted_server(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


@contextlib.asynccontextmanager
async def aiohttp_server(
    app: web.Application, keepalive_timeout: float = 75.0
) -> AsyncIterator[str]:
    runner = web.AppRunner(app, keepalive_timeout=keepalive_timeout)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def peer_echo_app(peers: list[tuple[str, int]]) -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        assert request.transport is not None  # a request being served has its connection
        peers.append(request.transport.get_extra_info("peername"))
        return web.Response(body=await request.read(), content_type="application/json")

    app = web.Application()
    app.router.add_post("/prefix/v1/chat/completions", echo)
    return app


async def post_and_read(
    pool: UpstreamPool, base_url: str, body: bytes = b'{"n": 1}'
) -> tuple[int, bytes]:
    response = await pool.post(base_url, "/v1/chat/completions", body)
    try:
        return response.status, await response.read()
    finally:
        response.release()


async def test_connections_are_kept_alive_and_reused() -> None:
    peers: list[tuple[str, int]] = []
    async with aiohttp_server(peer_echo_app(peers)) as base_url:
        pool = UpstreamPool(connect_timeout_s=5, read_timeout_s=5)
        for n in range(5):
            assert await post_and_read(pool, f"{base_url}/prefix", f'{{"n": {n}}}'.encode()) == (
                200,
                f'{{"n": {n}}}'.encode(),
            )
        assert len(set(peers)) == 1
        # Concurrent requests each get a connection of their own, then all stay pooled.
        results = await asyncio.gather(
            *(post_and_read(pool, f"{base_url}/prefix") for _ in range(4))
        )
        assert all(status == 200 for status, _ in results)
        assert pool.idle_connections() == 4
        await pool.close()


async def test_connections_the_replica_closed_while_idle_are_not_used() -> None:
    peers: list[tuple[str, int]] = []
    async with aiohttp_server(peer_echo_app(peers), keepalive_timeout=0.1) as base_url:
        pool = UpstreamPool(connect_timeout_s=5, read_timeout_s=5)
        assert (await post_and_read(pool, f"{base_url}/prefix"))[0] == 200
        await asyncio.sleep(0.5)
        assert (await post_and_read(pool, f"{base_url}/prefix"))[0] == 200
        assert len(set(peers)) == 2
        await pool.close()


async def test_a_request_that_meets_a_closing_connection_is_sent_again_on_a_fresh_one() -> None:
    # Each connection answers once, as keep-alive, then closes: the next request may be
    # written before the close is seen. No request may fail for it.
    requests_seen = 0

    async def answer_once_then_close(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        nonlocal requests_seen
        await read_request(reader)
        requests_seen += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
        await writer.drain()
        writer.close()

    server, base_url = await scripted_server(answer_once_then_close)
    pool = UpstreamPool(connect_timeout_s=5, read_timeout_s=5)
    for _ in range(10):
        assert await post_and_read(pool, base_url) == (200, b"ok")
    assert requests_seen == 10
    await pool.close()
    server.close()


async def test_streams_arrive_in_pieces_and_a_slow_reader_pauses_the_socket() -> None:
    chunk, chunks = b"x" * 65536, 128

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(chunks):
            await response.write(chunk)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", stream)
    async with aiohttp_server(app) as base_url:
        pool = UpstreamPool(connect_timeout_s=5, read_timeout_s=5)
        response = await pool.post(base_url, "/v1/completions", b"{}")
        await asyncio.sleep(0.5)
        # 8 MB were sent; what waits unread is bounded by the pause threshold and one read.
        assert response._buffered <= http_pool._PAUSE_BYTES + 4 * len(chunk)
        received = 0
        async for piece in response.iter_chunks():
            received += len(piece)
        response.release()
        assert received == len(chunk) * chunks
        assert pool.idle_connections() == 1
        await pool.close()


async def test_a_body_that_ends_with_the_connection_is_read_whole_and_the_connection_dropped() -> (
    None
):
    server, base_url = await scripted_server(
        answer_and_close(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + b"y" * 100_000
        )
    )
    pool = UpstreamPool(connect_timeout_s=5, read_timeout_s=5)
    assert await post_and_read(pool, base_url) == (200, b"y" * 100_000)
    assert pool.idle_connections() == 0
    await pool.close()
    server.close()


async def test_a_connection_lost_mid_answer_is_an_error_not_a_short_answer() -> None:
    server, base_url = await scripted_server(
        answer_and_close(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"z" * 10)
    )
    pool = UpstreamPool(connect_timeout_s=5, read_timeout_s=5)
    with pytest.raises(UpstreamConnectionError, match="closed the connection"):
        await post_and_read(pool, base_url)
    assert pool.idle_connections() == 0
    server.close()


async def test_a_malformed_answer_is_an_error() -> None:
    server, base_url = await scripted_server(answer_and_close(b"SMTP ready\r\n\r\n"))
    pool = UpstreamPool(connect_timeout_s=5, read_timeout_s=5)
    with pytest.raises(UpstreamConnectionError, match="malformed HTTP answer"):
        await post_and_read(pool, base_url)
    server.close()


async def test_stalls_time_out_before_the_headers_and_between_reads() -> None:
    async def headers_then_stall(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        request = await read_request(reader)
        if b"/v1/stall-body" in request:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            await writer.drain()
        await asyncio.sleep(30)

    server, base_url = await scripted_server(headers_then_stall)
    pool = UpstreamPool(connect_timeout_s=5, read_timeout_s=0.2)
    with pytest.raises(TimeoutError):
        await pool.post(base_url, "/v1/stall-headers", b"{}")
    response = await pool.post(base_url, "/v1/stall-body", b"{}")
    pieces = response.iter_chunks()
    assert await anext(pieces) == b"first"
    with pytest.raises(TimeoutError):
        await anext(pieces)
    response.release()
    assert pool.idle_connections() == 0
    server.close()


async def test_a_refused_connection_names_the_replica() -> None:
    port = free_port()
    pool = UpstreamPool(connect_timeout_s=5, read_timeout_s=5)
    with pytest.raises(UpstreamConnectionError, match=f"cannot connect to 127.0.0.1:{port}"):
        await pool.post(f"http://127.0.0.1:{port}", "/v1/models", b"")


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://host/v1", "http:///v1"])
def test_upstream_urls_must_be_http_with_a_host(url: str) -> None:
    with pytest.raises(ValueError, match="must be http:// or https://"):
        Origin.parse(url)


def test_origins_keep_the_path_prefix_and_default_ports() -> None:
    assert Origin.parse("https://replica.internal/vllm/") == Origin(
        "replica.internal", 443, True, "/vllm"
    )
    assert Origin.parse("http://10.0.0.5:8100") == Origin("10.0.0.5", 8100, False, "")
    assert Origin.parse("http://[::1]:8100").host_header == "[::1]:8100"

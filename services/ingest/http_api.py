"""The HTTP front door: a thin ASGI router over the proxy.

    POST /v1/chat/completions        POST /sessions/{slug}/v1/chat/completions
    POST /v1/completions             POST /sessions/{slug}/v1/completions
    GET  /v1/models                  GET  /sessions/{slug}/v1/models
    POST /parity/v1/flush            GET  /health            GET  /metrics

Written against ASGI directly rather than a web framework: ingest is on the hot
path of every rollout, and it needs nothing a framework adds.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import structlog

from parity.services.ingest import openai_errors
from parity.services.ingest.capture import CHAT, COMPLETIONS
from parity.services.ingest.metrics import IngestMetrics
from parity.services.ingest.proxy import Proxy, parse_json_object
from parity.services.ingest.replies import JsonReply, Reply
from parity.services.ingest.traffic_gate import TrafficGate

log = structlog.get_logger("parity.ingest.access")

ENDPOINTS = {"/v1/chat/completions": CHAT, "/v1/completions": COMPLETIONS}
FLUSH = "/parity/v1/flush"
DEFAULT_FLUSH_TIMEOUT_S = 30.0
MAX_FLUSH_TIMEOUT_S = 600.0
# Metric labels: every other path is "other", so a client cannot grow the label set.
ROUTES = frozenset({*ENDPOINTS, FLUSH, "/v1/models", "/health", "/metrics"})
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
Scope = dict[str, Any]
Headers = dict[bytes, bytes]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def split_session(path: str) -> tuple[str | None, str]:
    """`/sessions/{slug}/v1/x` -> (slug, `/v1/x`); other paths have no slug."""
    if path.startswith("/sessions/"):
        slug, _, rest = path[len("/sessions/") :].partition("/")
        return slug, "/" + rest
    return None, path


class IngestHttpApp:
    def __init__(
        self, proxy: Proxy, gate: TrafficGate, metrics: IngestMetrics, api_keys: set[str], max_body_bytes: int
    ) -> None:
        self.proxy = proxy
        self.gate = gate
        self.metrics = metrics
        self.api_keys = api_keys
        self.max_body_bytes = max_body_bytes
        # OpenAI's model objects carry a creation time; ingest's start stands in for it.
        self.started_at = int(time.time())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        slug, path = split_session(scope["path"])
        headers = dict(scope["headers"])
        summary: dict[str, Any] = {}
        endpoint = ENDPOINTS.get(path)
        status = 500
        try:
            if endpoint is not None and scope["method"] == "POST":
                # One admission for the whole exchange, streamed body included: a pause for
                # weight sync waits for this response to finish, never cuts it in half.
                async with self.gate.admit():
                    status = await self._respond(
                        send, receive, self._inference(headers, receive, endpoint, slug, summary), summary
                    )
            else:
                status = await self._respond(send, receive, self._other(scope, headers, receive, path, slug, summary), summary)
        finally:
            seconds = time.perf_counter() - started
            self.metrics.observe(path if path in ROUTES else "other", status, seconds)
            log.info(
                "request", method=scope["method"], path=path, status=status, latency_ms=round(seconds * 1000, 2),
                **summary,
            )  # fmt: skip

    async def _respond(self, send: Send, receive: Receive, produce: Awaitable[Reply], summary: dict[str, Any]) -> int:
        """Send the reply `produce` makes, or the error it raised; returns the status sent."""
        try:
            reply = await produce
        except openai_errors.HttpError as error:
            summary["error"] = error.message
            reply = JsonReply(error.status, error.body(), summary)
        except Exception as error:  # noqa: BLE001 - the process stays up; the agent hears why
            log.error("request_failed", exc_info=error)
            reply = JsonReply(500, openai_errors.HttpError(500, "internal error in ingest", "server_error").body(), summary)
        if isinstance(reply, JsonReply):
            # A length, as vLLM sends, rather than chunked framing around one body.
            headers = [(b"content-type", reply.content_type), (b"content-length", b"%d" % len(reply.body))]
            await send({"type": "http.response.start", "status": reply.status, "headers": headers})
            await send({"type": "http.response.body", "body": reply.body})
            return reply.status
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        # The request body is read, so the next message is the agent going away. Sends
        # to a gone agent are dropped silently, so without this the relay would read
        # the whole generation for nobody, and a pause would wait for it. A relay
        # waiting on a silent vLLM (its server behind, merging outputs) is stopped at
        # once, not at vLLM's next output, which may be the end of the generation.
        gone = asyncio.ensure_future(receive())
        if reply.abandon is not None:
            abandon = reply.abandon
            gone.add_done_callback(lambda done: None if done.cancelled() else abandon())
        try:
            async for event in reply.events:
                if gone.done():
                    break
                await send({"type": "http.response.body", "body": event, "more_body": True})
        finally:
            if gone.done():
                summary["disconnected"] = True
            gone.cancel()
            # Closing the relay releases vLLM's stream, which stops the generation, and
            # records the call with what was generated up to here.
            await reply.events.aclose()
        await send({"type": "http.response.body", "body": b""})
        return 200

    async def _inference(
        self, headers: Headers, receive: Receive, endpoint: int, slug: str | None, summary: dict[str, Any]
    ) -> Reply:
        self._authorize(headers)
        body = await self._read_body(headers, receive)
        header = headers.get(b"x-parity-session")
        # Latin-1, as HTTP defines header bytes; a slug outside ASCII is refused by its own checks.
        reply = await self.proxy.handle(endpoint, body, slug, header.decode("latin-1") if header else None)
        summary.update(reply.summary)
        return reply

    async def _other(
        self, scope: Scope, headers: Headers, receive: Receive, path: str, slug: str | None, summary: dict[str, Any]
    ) -> Reply:
        method = scope["method"]
        if path == "/health" and slug is None:
            return JsonReply(200, b"{}", summary)
        if path == "/metrics" and slug is None:
            return JsonReply(200, self.metrics.render(), summary, b"text/plain; version=0.0.4")
        self._authorize(headers)
        if path == FLUSH and slug is None:
            if method != "POST":
                raise openai_errors.HttpError(405, f"{FLUSH} accepts POST only", "invalid_request_error")
            timeout_s = flush_timeout(await self._read_body(headers, receive))
            captured = await self.proxy.sink.flush(timeout_s)
            return JsonReply(200, orjson.dumps({"object": "parity.flush", "captured": captured}), summary)
        if path == "/v1/models" and method == "GET":
            data = [
                {"id": m, "object": "model", "created": self.started_at, "owned_by": "parity"} for m in self.proxy.models()
            ]
            return JsonReply(200, orjson.dumps({"object": "list", "data": data}), summary)
        if path in ENDPOINTS:
            raise openai_errors.HttpError(405, f"{path} accepts POST only", "invalid_request_error")
        raise openai_errors.not_found(f"no route for {method} {scope['path']}")

    def _authorize(self, headers: Headers) -> None:
        if not self.api_keys:
            return
        header = headers.get(b"authorization", b"").decode(errors="replace")
        key = header[7:] if header.lower().startswith("bearer ") else ""
        if not any(hmac.compare_digest(key, allowed) for allowed in self.api_keys):
            raise openai_errors.unauthorized("missing or invalid API key (send Authorization: Bearer <key>)")

    async def _read_body(self, headers: Headers, receive: Receive) -> bytes:
        declared = headers.get(b"content-length")
        if declared and int(declared) > self.max_body_bytes:
            raise openai_errors.too_large(f"request body is {int(declared)} bytes; at most {self.max_body_bytes} are accepted")
        chunks, size = [], 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise openai_errors.too_large(f"request body exceeds {self.max_body_bytes} bytes")
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)


def flush_timeout(body: bytes) -> float:
    """The `timeout_s` of a flush request's optional JSON body."""
    if not body.strip():
        return DEFAULT_FLUSH_TIMEOUT_S
    request = parse_json_object(body)
    if request.keys() - {"timeout_s"}:
        raise openai_errors.bad_request('a flush request body holds at most "timeout_s"')
    timeout_s = request.get("timeout_s", DEFAULT_FLUSH_TIMEOUT_S)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not 0 < timeout_s <= MAX_FLUSH_TIMEOUT_S:
        raise openai_errors.bad_request(
            f"timeout_s must be a number of seconds in (0, {MAX_FLUSH_TIMEOUT_S:g}], got {timeout_s!r}", "timeout_s"
        )
    return float(timeout_s)

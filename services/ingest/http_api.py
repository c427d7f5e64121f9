"""The HTTP front door: a thin ASGI router over the endpoints.

    POST /v1/chat/completions        POST /v1/completions          (OpenAI, endpoints/openai_chat/)
    POST /v1/messages                POST /v1/messages/count_tokens (Anthropic, endpoints/anthropic_messages/)
    POST /v1/responses                                              (OpenAI Responses, endpoints/openai_responses/)
    POST /sessions/{id}/feedback                                    (late feedback, endpoints/feedback/)
    GET  /v1/models                  POST /parity/v1/flush          GET /health      GET /metrics

Every API path also answers under `/sessions/{slug}`. Written against ASGI directly
rather than a web framework: ingest is on the hot path of every rollout, and it needs
nothing a framework adds. Errors come back in the shape of the API that was called.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
import structlog

from parity.api.auth.v1 import auth_pb2
from parity.services.ingest import openai_errors
from parity.services.ingest.capture.capture_sink import CaptureSink
from parity.services.ingest.capture.recorder import CHAT, COMPLETIONS
from parity.services.ingest.chat_backend import ChatBackend
from parity.services.ingest.endpoints.anthropic_messages.serving import AnthropicMessagesServing
from parity.services.ingest.endpoints.feedback.protocol import feedback_route
from parity.services.ingest.endpoints.feedback.serving import FeedbackServing
from parity.services.ingest.endpoints.openai_chat.serving import OpenAIChatServing
from parity.services.ingest.endpoints.openai_responses.serving import ResponsesServing
from parity.services.ingest.endpoints.request_start import parse_json_object
from parity.services.ingest.endpoints.session_headers import SessionHeaders
from parity.services.ingest.metrics import IngestMetrics
from parity.services.ingest.replies import FinalEvent, JsonReply, Reply
from parity.services.ingest.traffic_gate import TrafficGate
from parity.services.runtime.auth import TokenTable, role_name

ACCESS_LOG = "parity.ingest.access"
log = structlog.get_logger(ACCESS_LOG)

FLUSH = "/parity/v1/flush"
# What the access log and metrics name the feedback route: one label however many sessions.
FEEDBACK = "/sessions/{session_id}/feedback"
MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
RESPONSES = "/v1/responses"
INFERENCE_PATHS = ("/v1/chat/completions", "/v1/completions", MESSAGES, RESPONSES)
ANTHROPIC_PATHS = frozenset({MESSAGES, COUNT_TOKENS})
DEFAULT_FLUSH_TIMEOUT_S = 30.0
MAX_FLUSH_TIMEOUT_S = 600.0
WEBSOCKET_POLICY_VIOLATION = 1008
UPGRADE_REQUIRED = 426
WEBSOCKET_REFUSAL = openai_errors.HttpError(
    UPGRADE_REQUIRED,
    "WebSocket transport is not supported: send requests over HTTP",
    "invalid_request_error",
)
# Metric labels: every other path is "other", so a client cannot grow the label set.
ROUTES = frozenset(
    {*INFERENCE_PATHS, COUNT_TOKENS, FLUSH, FEEDBACK, "/v1/models", "/health", "/metrics"}
)
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
Scope = dict[str, Any]
Headers = dict[bytes, bytes]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
LogFields = Callable[[], dict[str, Any]]


@dataclass
class Endpoints:
    """The APIs ingest serves, each behind its own serving module."""

    chat: OpenAIChatServing
    messages: AnthropicMessagesServing
    responses: ResponsesServing
    backend: ChatBackend
    sink: CaptureSink
    feedback: FeedbackServing


def split_session(path: str) -> tuple[str | None, str]:
    """`/sessions/{slug}/v1/x` -> (slug, `/v1/x`); other paths have no slug."""
    if path.startswith("/sessions/"):
        slug, _, rest = path[len("/sessions/") :].partition("/")
        return slug, "/" + rest
    return None, path


class IngestHttpApp:
    def __init__(
        self,
        endpoints: Endpoints,
        gate: TrafficGate,
        metrics: IngestMetrics,
        tokens: TokenTable | None,
        max_body_bytes: int,
    ) -> None:
        self.endpoints = endpoints
        self.gate = gate
        self.metrics = metrics
        self.tokens = tokens
        self.max_body_bytes = max_body_bytes
        # OpenAI's model objects carry a creation time; ingest's start stands in for it.
        self.started_at = int(time.time())
        # Asked per request, before the line's fields are gathered: at a level above info
        # (as under load), gathering and then dropping them cost 5 µs of every call.
        self.access_logger = logging.getLogger(ACCESS_LOG)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await refuse_websocket(scope, send)
            return
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        slug, path = split_session(scope["path"])
        if slug is not None and path not in INFERENCE_PATHS:
            # The session id, still percent-encoded, is the slug the feedback route hands on.
            segment = feedback_route(scope.get("raw_path") or quote(scope["path"]).encode())
            if segment is not None:
                slug, path = segment, FEEDBACK
        headers = dict(scope["headers"])
        method = scope["method"]
        status, fields = 500, _no_fields
        try:
            if path in INFERENCE_PATHS and method == "POST":
                # One admission for the whole exchange, streamed body included: a pause for
                # weight sync waits for this response to finish, never cuts it in half. The
                # backend, once it has read the model, adds the model's route to it (admit_route).
                async with self.gate.admit():
                    status, fields = await self._respond(
                        send, receive, path, self._inference(headers, receive, path, slug)
                    )
            else:
                status, fields = await self._respond(
                    send, receive, path, self._other(method, headers, receive, path, slug)
                )
        finally:
            seconds = time.perf_counter() - started
            self.metrics.observe(path if path in ROUTES else "other", status, seconds)
            if self.access_logger.isEnabledFor(logging.INFO):
                log.info(
                    "request", method=method, path=path, status=status, latency_ms=round(seconds * 1000, 2), **fields(),
                )  # fmt: skip

    async def _respond(
        self, send: Send, receive: Receive, path: str, produce: Awaitable[Reply]
    ) -> tuple[int, LogFields]:
        """Send the reply `produce` makes, or the error it raised; returns the status sent and the log's fields."""
        try:
            reply = await produce
        except openai_errors.HttpError as error:
            reply = JsonReply(error.status, _error_body(path, error), {"error": error.message})
        except Exception as error:  # noqa: BLE001 - the process stays up; the agent hears why
            log.error("request_failed", exc_info=error)
            failure = openai_errors.HttpError(500, "internal error in ingest", "server_error")
            reply = JsonReply(500, _error_body(path, failure), {"error": failure.message})
        if isinstance(reply, JsonReply):
            # A length, as vLLM sends, rather than chunked framing around one body.
            headers = [
                (b"content-type", reply.content_type),
                (b"content-length", b"%d" % len(reply.body)),
            ]
            await send({"type": "http.response.start", "status": reply.status, "headers": headers})
            await send({"type": "http.response.body", "body": reply.body})
            return reply.status, reply.log_fields
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
        disconnected = ended = False
        try:
            async for event in reply.events:
                if gone.done():
                    break
                ended = isinstance(event, FinalEvent)
                await send({"type": "http.response.body", "body": event, "more_body": not ended})
                if ended:
                    break
        finally:
            disconnected = gone.done() and not ended
            gone.cancel()
            # Closing the relay releases vLLM's stream, which stops the generation, and
            # records the call with what was generated up to here.
            await reply.events.aclose()
        if not ended:
            await send({"type": "http.response.body", "body": b""})
        if disconnected:
            return 200, lambda: reply.log_fields() | {"disconnected": True}
        return 200, reply.log_fields

    async def _inference(
        self, headers: Headers, receive: Receive, path: str, slug: str | None
    ) -> Reply:
        self._authorize(headers)
        body = await self._read_body(headers, receive)
        session = SessionHeaders.read(headers)
        if path == MESSAGES:
            return await self.endpoints.messages.create(body, slug, session)
        if path == RESPONSES:
            return await self.endpoints.responses.create(body, slug, session)
        endpoint = CHAT if path == "/v1/chat/completions" else COMPLETIONS
        return await self.endpoints.chat.handle(endpoint, body, slug, session)

    async def _other(
        self, method: str, headers: Headers, receive: Receive, path: str, slug: str | None
    ) -> Reply:
        if path == "/health" and slug is None:
            return JsonReply(200, b"{}")
        if path == "/metrics" and slug is None:
            return JsonReply(200, self.metrics.render(), content_type=b"text/plain; version=0.0.4")
        self._authorize(headers)
        if path == FLUSH and slug is None:
            if method != "POST":
                raise openai_errors.HttpError(
                    405, f"{FLUSH} accepts POST only", "invalid_request_error"
                )
            timeout_s = flush_timeout(await self._read_body(headers, receive))
            captured = await self.endpoints.sink.flush(timeout_s)
            return JsonReply(200, orjson.dumps({"object": "parity.flush", "captured": captured}))
        if path == FEEDBACK:
            if method != "POST":
                raise openai_errors.HttpError(
                    405, "feedback accepts POST only", "invalid_request_error"
                )
            assert slug is not None
            return await self.endpoints.feedback.create(
                slug, await self._read_body(headers, receive)
            )
        if path == COUNT_TOKENS and method == "POST":
            return await self.endpoints.messages.count_tokens(
                await self._read_body(headers, receive)
            )
        if path == "/v1/models" and method == "GET":
            data = [{"id": m, "object": "model", "created": self.started_at, "owned_by": "parity"}
                    for m in self.endpoints.backend.models()]  # fmt: skip
            return JsonReply(200, orjson.dumps({"object": "list", "data": data}))
        if path in ROUTES and path not in ("/health", "/metrics", "/v1/models"):
            raise openai_errors.HttpError(405, f"{path} accepts POST only", "invalid_request_error")
        raise openai_errors.not_found(f"no route for {method} {path}")

    def _authorize(self, headers: Headers) -> None:
        """An agent-role token as OpenAI clients send it (Authorization: Bearer) or as Anthropic's do (x-api-key)."""
        if self.tokens is None:
            return
        header = headers.get(b"authorization", b"").decode(errors="replace")
        key = (
            header[7:]
            if header.lower().startswith("bearer ")
            else headers.get(b"x-api-key", b"").decode(errors="replace")
        )
        role = self.tokens.role_of(key) if key else auth_pb2.ROLE_UNSPECIFIED
        if role == auth_pb2.ROLE_UNSPECIFIED:
            raise openai_errors.unauthorized(
                "missing or invalid API key (send Authorization: Bearer <key>, or x-api-key)"
            )
        if role < auth_pb2.ROLE_AGENT:
            raise openai_errors.HttpError(403, f"this API key has the {role_name(role)} role; calls need agent or higher",
                                          "permission_error")  # fmt: skip

    async def _read_body(self, headers: Headers, receive: Receive) -> bytes:
        declared = headers.get(b"content-length")
        if declared and int(declared) > self.max_body_bytes:
            raise openai_errors.too_large(
                f"request body is {int(declared)} bytes; at most {self.max_body_bytes} are accepted"
            )
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


def _no_fields() -> dict[str, Any]:
    return {}


def _error_body(path: str, error: openai_errors.HttpError) -> bytes:
    return error.anthropic_body() if path in ANTHROPIC_PATHS else error.body()


def flush_timeout(body: bytes) -> float:
    """The `timeout_s` of a flush request's optional JSON body."""
    if not body.strip():
        return DEFAULT_FLUSH_TIMEOUT_S
    request = parse_json_object(body)
    if request.keys() - {"timeout_s"}:
        raise openai_errors.bad_request('a flush request body holds at most "timeout_s"')
    timeout_s = request.get("timeout_s", DEFAULT_FLUSH_TIMEOUT_S)
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not 0 < timeout_s <= MAX_FLUSH_TIMEOUT_S
    ):
        raise openai_errors.bad_request(
            f"timeout_s must be a number of seconds in (0, {MAX_FLUSH_TIMEOUT_S:g}], got {timeout_s!r}",
            "timeout_s",
        )
    return float(timeout_s)


async def refuse_websocket(scope: Scope, send: Send) -> None:
    """Refuse a WebSocket handshake so that a client falls back to HTTP at once. Codex CLI tries the Responses API
    over a WebSocket first: a 426 (Upgrade Required) answer makes it use HTTP after that one handshake, while a 403
    (a plain close) or a 404 has it retry the handshake 6 times with backoff first, about 6.6 s of every run."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": WEBSOCKET_POLICY_VIOLATION})
        return
    body = WEBSOCKET_REFUSAL.body()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send(
        {"type": "websocket.http.response.start", "status": UPGRADE_REQUIRED, "headers": headers}
    )
    await send({"type": "websocket.http.response.body", "body": body})

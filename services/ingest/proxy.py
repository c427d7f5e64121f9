"""The serving logic of the OpenAI-compatible endpoints: forward, record, answer.

For each request: validate it, resolve its session, ask the session's replica for
token ids and logprobs, pass the answer (streamed or not) back without what the
agent did not ask for, and hand the captured call to the sink. With durability
"before", the agent's response (or a stream's final `[DONE]`) waits until the call
is in the store or the spool.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from parity.api.common.v1 import llm_call_pb2
from parity.services.ingest import openai_errors, session_resolution
from parity.services.ingest.capture import CHAT, COMPLETIONS, CallRecorder, CaptureRequest
from parity.services.ingest.capture_sink import CaptureSink
from parity.services.ingest.external_models import ExternalModels
from parity.services.ingest.replica_router import ReplicaRouter
from parity.services.ingest.replies import (
    DISCONNECTED,
    POLICY,
    SUCCEEDED,
    UPSTREAM_ERROR,
    JsonReply,
    Reply,
    StreamReply,
)
from parity.services.ingest.upstream import UpstreamClient, UpstreamFailed, UpstreamReply
from parity.services.ingest.upstream_http import UpstreamAbandoned, UpstreamConnectionError

log = structlog.get_logger(__name__)

PATHS = {CHAT: "/v1/chat/completions", COMPLETIONS: "/v1/completions"}


@dataclass
class PolicyState:
    """The policy version stamped on calls forwarded from now on."""

    version: int = 0


class Proxy:
    def __init__(
        self,
        router: ReplicaRouter,
        upstream: UpstreamClient,
        sink: CaptureSink,
        policy: PolicyState,
        external: ExternalModels,
    ) -> None:
        self.router = router
        self.upstream = upstream
        self.sink = sink
        self.policy = policy
        self.external = external

    def models(self) -> list[str]:
        return sorted(self.router.models() | set(self.external.models()))

    async def handle(self, endpoint: int, raw_body: bytes, path_slug: str | None, header: str | None) -> Reply:
        started_at = time.time()
        body = parse_json_object(raw_body)
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise openai_errors.bad_request("model is required and must be a non-empty string", "model")
        if endpoint == CHAT and (not isinstance(body.get("messages"), list) or not body["messages"]):
            raise openai_errors.bad_request("messages is required and must be a non-empty array", "messages")
        if endpoint == COMPLETIONS and not isinstance(body.get("prompt"), str | list):
            raise openai_errors.bad_request("prompt is required and must be a string or an array", "prompt")
        session, metadata = session_resolution.resolve(path_slug, header, body)
        summary: dict[str, Any] = {"session_id": session.session_id, "model": model, "stream": bool(body.get("stream"))}
        self.sink.check_accepting()
        if self.external.serves(model):
            external = CaptureRequest(endpoint, body, raw_body, session, metadata)
            return await self.external.complete(external, self.sink, summary, started_at)
        if not self.router.knows(model):
            if starting := self.router.starting():
                raise openai_errors.unavailable(
                    f"model `{model}` is not known yet: {starting} replica(s) have not answered; retry shortly"
                )
            raise openai_errors.not_found(
                f"The model `{model}` does not exist. Available: {', '.join(self.models()) or 'none'}.", "model"
            )
        candidates = self.router.candidates(model, session.session_id)
        capture = CaptureRequest.prepare(endpoint, body, raw_body, session, metadata)
        policy_version = self.policy.version
        recorder = CallRecorder(capture)
        call_fields = {
            "model": model, "policy_version": policy_version, "kind": POLICY, "started_at": started_at,
            "streamed": summary["stream"],
        }  # fmt: skip
        try:
            reply = await self.upstream.post(candidates, PATHS[endpoint], orjson.dumps(body))
        except UpstreamFailed as failure:
            # The call is the session's even though no replica answered it: the record
            # says a step failed, where its absence would look like no step at all.
            summary["replica"] = failure.replica.name
            call = recorder.to_call(
                replica=failure.replica.name, attempts=failure.attempts, first_byte_at=None,
                upstream_seconds=time.time() - started_at, outcome=UPSTREAM_ERROR, error_message=failure.message,
                **call_fields,
            )  # fmt: skip
            await self.sink.submit(call)
            raise
        summary["replica"] = reply.replica.name
        call_fields |= {"replica": reply.replica.name, "attempts": reply.attempts}
        if reply.response.status != 200 or not body.get("stream"):
            try:
                payload = await reply.response.read()
                response = orjson.loads(payload) if reply.response.status == 200 else None
            except (UpstreamConnectionError, TimeoutError, orjson.JSONDecodeError) as error:
                failure = (
                    openai_errors.gateway_timeout(f"upstream {reply.replica.name} stalled while answering")
                    if isinstance(error, TimeoutError)
                    else openai_errors.bad_gateway(f"upstream {reply.replica.name} sent an unreadable answer: {error!r}")
                )
                call = recorder.to_call(
                    first_byte_at=reply.first_byte_at, upstream_seconds=time.time() - started_at,
                    outcome=UPSTREAM_ERROR, error_message=failure.message, **call_fields,
                )  # fmt: skip
                await self.sink.submit(call)
                raise failure from None
            finally:
                reply.release()
            upstream_seconds = time.time() - started_at
            if response is None:
                call = recorder.to_call(
                    first_byte_at=reply.first_byte_at, upstream_seconds=upstream_seconds,
                    outcome=UPSTREAM_ERROR, error_message=payload[:500].decode(errors="replace"), **call_fields,
                )  # fmt: skip
                await self.sink.submit(call)
                return JsonReply(reply.response.status, payload, summary)
            recorder.add_response(response)
            capture.strip(response)
            call = recorder.to_call(
                first_byte_at=reply.first_byte_at, upstream_seconds=upstream_seconds,
                outcome=SUCCEEDED, **call_fields,
            )  # fmt: skip
            _summarize(summary, call)
            await self.sink.submit(call)
            return JsonReply(200, orjson.dumps(response), summary)
        return StreamReply(self._relay(reply, recorder, capture, call_fields, summary), summary, reply.response.abandon)

    async def _relay(
        self,
        reply: UpstreamReply,
        recorder: CallRecorder,
        capture: CaptureRequest,
        call_fields: dict[str, Any],
        summary: dict[str, Any],
    ) -> AsyncGenerator[bytes, None]:
        """Pass SSE events through, recording tokens; hold `[DONE]` until the call is durable.

        Events that arrive in one network read go to the agent in one write: under
        load a read holds many, and a write per event would cost more than the rest
        of the relay. Nothing waits to be grouped; a lone event is passed on at once.
        """
        outcome, error_message, first_byte_at = DISCONNECTED, "", None
        partial = b""
        # Until the stream has run its course here, the agent leaving closes this
        # generator at whichever yield it is held; the call is then recorded on the way
        # out, whatever the outcome so far (the last events may have held `[DONE]`).
        ran_to_end = False
        try:
            async for data in reply.response.iter_chunks():
                payloads, partial = split_sse_data(partial, data)
                if not payloads:
                    continue
                if first_byte_at is None:
                    first_byte_at = time.time()
                events = []
                for payload in payloads:
                    if payload == b"[DONE]":
                        outcome = SUCCEEDED
                        break
                    chunk = orjson.loads(payload)
                    recorder.add_chunk(chunk)
                    capture.strip(chunk)
                    events.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
                if events:
                    yield b"".join(events)
                if outcome == SUCCEEDED:
                    break
            else:
                outcome, error_message = UPSTREAM_ERROR, "upstream closed the stream before [DONE]"
                yield b"data: " + openai_errors.bad_gateway(error_message).body() + b"\n\n"
            ran_to_end = True
        except UpstreamAbandoned:
            # The agent went away while vLLM was silent: recorded as disconnected, below.
            return
        except (UpstreamConnectionError, TimeoutError, orjson.JSONDecodeError) as error:
            outcome, error_message = UPSTREAM_ERROR, f"upstream stream failed: {error!r}"
            yield b"data: " + openai_errors.bad_gateway(error_message).body() + b"\n\n"
            ran_to_end = True
        finally:
            reply.release()
            call = recorder.to_call(
                first_byte_at=first_byte_at,
                upstream_seconds=time.time() - call_fields["started_at"], outcome=outcome,
                error_message=error_message, **call_fields,
            )  # fmt: skip
            _summarize(summary, call)
            if not ran_to_end:
                self.sink.submit_nowait(call)
        await self.sink.submit(call)
        yield b"data: [DONE]\n\n"


def split_sse_data(partial: bytes, data: bytes) -> tuple[list[bytes], bytes]:
    """The `data: ` payloads of the SSE lines that `partial + data` completes, and the
    unfinished line left over for the next read."""
    lines = (partial + data if partial else data).split(b"\n")
    rest = lines.pop()
    return [line[6:].strip() for line in lines if line.startswith(b"data: ")], rest


def parse_json_object(raw_body: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw_body)
    except orjson.JSONDecodeError as error:
        raise openai_errors.bad_request(f"request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise openai_errors.bad_request("request body must be a JSON object")
    return body


def _summarize(summary: dict[str, Any], call: llm_call_pb2.LlmCall) -> None:
    summary["prompt_tokens"] = call.usage.prompt_tokens
    summary["completion_tokens"] = call.usage.completion_tokens

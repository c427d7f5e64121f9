"""What ingest adds to a request for capture, what it removes from the answer, and the record it keeps.

vLLM returns exact token ids only when asked (`return_token_ids`) and logprobs only
when asked (`logprobs`). Ingest asks for both, records them, and sets them back to
the `null` vLLM would have sent had the agent not asked, so the agent sees exactly
the response it would have got from vLLM directly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from google.protobuf import duration_pb2, timestamp_pb2

from parity.api.common.v1 import llm_call_pb2
from parity.core.ids import new_id
from parity.core.session_slug import SessionRef
from parity.core.tokens import pack_floats, pack_token_ids

CHAT = llm_call_pb2.CALL_ENDPOINT_CHAT_COMPLETIONS
COMPLETIONS = llm_call_pb2.CALL_ENDPOINT_COMPLETIONS
MESSAGES = llm_call_pb2.CALL_ENDPOINT_ANTHROPIC_MESSAGES
RESPONSES = llm_call_pb2.CALL_ENDPOINT_RESPONSES


@dataclass
class CaptureRequest:
    """A client request as ingest forwards it, and what was added for capture."""

    endpoint: llm_call_pb2.CallEndpoint
    body: dict[str, Any]
    raw_body: bytes
    session: SessionRef
    metadata: dict[str, str]
    added_token_ids: bool = False
    added_logprobs: bool = False
    lora_adapter: str = ""
    """The LoRA adapter the request was sent to in place of the model it names (see upstream/policy_adapter.py)."""
    routed_model: str = ""
    """The model the request named before it was sent to `lora_adapter`."""

    @classmethod
    def prepare(
        cls,
        endpoint: llm_call_pb2.CallEndpoint,
        body: dict[str, Any],
        raw_body: bytes,
        session: SessionRef,
        metadata: dict[str, str],
    ) -> CaptureRequest:
        """Ask the upstream for token ids and sampled-token logprobs if the client did not."""
        request = cls(endpoint, body, raw_body, session, metadata)
        if not body.get("return_token_ids"):
            body["return_token_ids"] = True
            request.added_token_ids = True
        if endpoint == COMPLETIONS:
            if body.get("logprobs") is None:
                # Completions take a count of alternatives; 0 returns just the sampled token's.
                body["logprobs"] = 0
                request.added_logprobs = True
        elif not body.get("logprobs"):
            # Chat, and the endpoints served through chat (Messages, Responses).
            body["logprobs"] = True
            request.added_logprobs = True
        return request

    def strip(self, response: dict[str, Any]) -> None:
        """Remove from a response (or stream chunk) what was added for capture only."""
        if self.lora_adapter and response.get("model") == self.lora_adapter:
            # The adapter is how this policy version is served, not a model the agent chose.
            response["model"] = self.routed_model
        if self.added_token_ids and "prompt_token_ids" in response:
            response["prompt_token_ids"] = None
        for choice in response.get("choices") or ():
            if self.added_token_ids:
                if "token_ids" in choice:
                    choice["token_ids"] = None
                if "prompt_token_ids" in choice:
                    choice["prompt_token_ids"] = None
            if self.added_logprobs and "logprobs" in choice:
                choice["logprobs"] = None


@dataclass
class _ChoiceRecord:
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    # Streamed tool calls arrive as fragments keyed by their index.
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str = ""
    stop_reason: str = ""


class CallRecorder:
    """Collects one call's tokens from a response or from its stream chunks."""

    def __init__(self, request: CaptureRequest) -> None:
        self.request = request
        self.prompt_token_ids: list[int] | None = None
        self.choices: dict[int, _ChoiceRecord] = {}
        self.usage: dict[str, Any] | None = None

    def add_response(self, response: dict[str, Any]) -> None:
        """A complete (non-streamed) response."""
        self.add_chunk(response, streamed=False)

    def add_chunk(self, chunk: dict[str, Any], streamed: bool = True) -> None:
        """Record a response or stream chunk, then take out of it what capture added to the request.

        Taken out at once rather than when the answer goes out: otherwise the per-token logprob
        objects live through the durable write, and under load the allocator's and garbage
        collector's work on them costs throughput (docs/design/ingest-mixed-load.md)."""
        if chunk.get("prompt_token_ids") and self.prompt_token_ids is None:
            self.prompt_token_ids = chunk["prompt_token_ids"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        # Runs once per streamed token under load: lookups and logprobs are inlined.
        for choice in chunk.get("choices") or ():
            index = choice.get("index", 0)
            record = self.choices.get(index)
            if record is None:
                record = self.choices[index] = _ChoiceRecord()
            if choice.get("prompt_token_ids") and self.prompt_token_ids is None:
                self.prompt_token_ids = choice["prompt_token_ids"]
            if choice.get("token_ids"):
                record.token_ids.extend(choice["token_ids"])
            logprobs = choice.get("logprobs")
            if logprobs:
                if (content := logprobs.get("content")) is not None:  # chat
                    record.logprobs += [entry["logprob"] for entry in content]
                elif (token_logprobs := logprobs.get("token_logprobs")) is not None:  # completions
                    record.logprobs += token_logprobs
            if choice.get("finish_reason"):
                record.finish_reason = choice["finish_reason"]
            if choice.get("stop_reason") is not None:
                record.stop_reason = str(choice["stop_reason"])
            if "text" in choice:
                record.text.append(choice["text"] or "")
            message = choice.get("delta" if streamed else "message") or {}
            if message.get("content"):
                record.text.append(message["content"])
            reasoning = message.get("reasoning") or message.get("reasoning_content")
            if reasoning:
                record.reasoning.append(reasoning)
            for position, tool_call in enumerate(message.get("tool_calls") or ()):
                _add_tool_call(record, tool_call, position, streamed)
        self.request.strip(chunk)

    def to_call(
        self,
        *,
        model: str,
        policy_version: int,
        replica: str,
        kind: llm_call_pb2.CallKind,
        started_at: float,
        first_byte_at: float | None,
        upstream_seconds: float,
        attempts: int,
        outcome: llm_call_pb2.CallOutcome,
        error_message: str = "",
        streamed: bool = False,
        call_id: str = "",
    ) -> llm_call_pb2.LlmCall:
        request, session = self.request, self.request.session
        call = llm_call_pb2.LlmCall(
            # Made once per record: a retried write of the same record keeps it, so the store dedupes it.
            call_id=call_id or new_id(),
            session_id=session.session_id,
            parent_session_ids=session.parent_session_ids,
            trajectory_name=session.trajectory_name,
            thread_id=session.thread_id,
            metadata=self.request.metadata,
            # Resolved per call (endpoints/session_resolution.py): the store keeps a session's from its first call
            # that carries them.
            end_user_id=session.end_user_id,
            tags=session.tags,
            model=model,
            policy_version=policy_version,
            kind=kind,
            endpoint=request.endpoint,
            request_json=request.raw_body,
            prompt_token_ids=pack_token_ids(self.prompt_token_ids or ()),
            replica=replica,
            outcome=outcome,
            error_message=error_message,
            streamed=streamed,
            lora_adapter=request.lora_adapter,
        )
        completion_tokens = 0
        for index in sorted(self.choices):
            record = self.choices[index]
            completion_tokens += len(record.token_ids)
            call.choices.add(
                index=index,
                token_ids=pack_token_ids(record.token_ids),
                logprobs=pack_floats(record.logprobs)
                if len(record.logprobs) == len(record.token_ids)
                else b"",
                finish_reason=record.finish_reason,
                text="".join(record.text),
                reasoning_text="".join(record.reasoning),
                tool_calls_json=orjson.dumps(
                    [record.tool_calls[i] for i in sorted(record.tool_calls)]
                )
                if record.tool_calls
                else b"",
                stop_reason=record.stop_reason,
            )
        usage = self.usage or {}
        call.usage.prompt_tokens = usage.get("prompt_tokens") or len(self.prompt_token_ids or ())
        call.usage.completion_tokens = usage.get("completion_tokens") or completion_tokens
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached:
            call.usage.cached_prompt_tokens = cached
        timings = call.timings
        _set_seconds(timings.start_time, started_at)
        _set_seconds(timings.end_time, time.time())
        _set_seconds(timings.upstream_duration, upstream_seconds)
        if first_byte_at is not None:
            _set_seconds(timings.time_to_first_token, first_byte_at - started_at)
        timings.upstream_attempts = attempts
        return call


def _set_seconds(message: timestamp_pb2.Timestamp | duration_pb2.Duration, seconds: float) -> None:
    """What FromNanoseconds does, at half its cost: it runs four times for every call."""
    nanos = int(seconds * 1e9)
    whole, part = divmod(abs(nanos), 1_000_000_000)
    # A Duration's nanos carry its seconds' sign (a clock step back can make one negative).
    message.seconds, message.nanos = (whole, part) if nanos >= 0 else (-whole, -part)


def _add_tool_call(
    record: _ChoiceRecord, tool_call: dict[str, Any], position: int, streamed: bool
) -> None:
    index = tool_call.get("index", position) if streamed else position
    merged = record.tool_calls.setdefault(
        index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
    )
    if tool_call.get("id"):
        merged["id"] = tool_call["id"]
    function = tool_call.get("function") or {}
    if function.get("name"):
        merged["function"]["name"] += function["name"]
    if function.get("arguments"):
        merged["function"]["arguments"] += function["arguments"]

"""What the serving logic hands the HTTP layer, and the call outcomes it records."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from parity.api.common.v1 import llm_call_pb2

SUCCEEDED = llm_call_pb2.CALL_OUTCOME_SUCCEEDED
UPSTREAM_ERROR = llm_call_pb2.CALL_OUTCOME_UPSTREAM_ERROR
DISCONNECTED = llm_call_pb2.CALL_OUTCOME_CLIENT_DISCONNECTED
POLICY = llm_call_pb2.CALL_KIND_POLICY
EXTERNAL = llm_call_pb2.CALL_KIND_EXTERNAL


@dataclass
class JsonReply:
    status: int
    body: bytes
    # Fields for the access log: session, model, replica, tokens.
    summary: dict[str, Any]
    content_type: bytes = b"application/json"


@dataclass
class StreamReply:
    events: AsyncGenerator[bytes, None]
    summary: dict[str, Any]
    # Stops the stream at once when the agent goes away, even while `events` waits on
    # a silent upstream; `events` then ends, having recorded the call as disconnected.
    abandon: Callable[[], None] | None = None


Reply = JsonReply | StreamReply

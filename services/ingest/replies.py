"""What an endpoint hands the HTTP layer, and the call outcomes it records."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parity.api.common.v1 import llm_call_pb2

if TYPE_CHECKING:
    from parity.services.ingest.capture.call_capture import CallCapture

SUCCEEDED = llm_call_pb2.CALL_OUTCOME_SUCCEEDED
UPSTREAM_ERROR = llm_call_pb2.CALL_OUTCOME_UPSTREAM_ERROR
DISCONNECTED = llm_call_pb2.CALL_OUTCOME_CLIENT_DISCONNECTED
SESSION_CAPPED = llm_call_pb2.CALL_OUTCOME_SESSION_CAPPED
POLICY = llm_call_pb2.CALL_KIND_POLICY
EXTERNAL = llm_call_pb2.CALL_KIND_EXTERNAL


class FinalEvent(bytes):
    """A stream's last event: sent with the response's end, in one write rather than two. An endpoint
    yields nothing after it; a stream that ends without one is ended by an empty write."""


@dataclass
class JsonReply:
    status: int
    body: bytes
    log: dict[str, Any] = field(default_factory=dict)
    """What the access log says of the request beyond its call: session, model, the error."""
    capture: CallCapture | None = None
    content_type: bytes = b"application/json"

    def log_fields(self) -> dict[str, Any]:
        return self.log | self.capture.log_fields() if self.capture is not None else self.log


@dataclass
class StreamReply:
    events: AsyncGenerator[bytes, None]
    capture: CallCapture
    # Stops the stream at once when the agent goes away, even while `events` waits on
    # a silent upstream; `events` then ends, having recorded the call as disconnected.
    abandon: Callable[[], None] | None = None
    log: dict[str, Any] = field(default_factory=dict)

    def log_fields(self) -> dict[str, Any]:
        return self.log | self.capture.log_fields()


Reply = JsonReply | StreamReply

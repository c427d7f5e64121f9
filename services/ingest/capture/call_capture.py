"""One captured call, from the request to its record: the only place a call is recorded.

Every endpoint opens one `CallCapture` per call it forwards, feeds it the upstream's
answer (whole, or chunk by chunk), and ends it with an outcome; `finish` hands the
record to the sink (and, with durability "before", waits until it is durable), and a
second finish is refused, so no path records a call twice or forgets it. The access
log reads its fields back from here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from parity.api.common.v1 import llm_call_pb2
from parity.core.ids import new_id
from parity.services.ingest.capture.capture_sink import CaptureSink
from parity.services.ingest.capture.recorder import CallRecorder, CaptureRequest


class CallCapture:
    def __init__(
        self,
        request: CaptureRequest,
        sink: CaptureSink,
        *,
        model: str,
        served_model: str,
        policy_version: int,
        kind: llm_call_pb2.CallKind,
        started_at: float,
    ) -> None:
        self.request = request
        self.sink = sink
        self.recorder = CallRecorder(request)
        self.model = model
        self.served_model = served_model
        self.policy_version = policy_version
        self.kind = kind
        self.started_at = started_at
        # Known before the answer, so an API can name it up front (a Responses id is derived from it).
        self.call_id = new_id()
        self.replica = ""
        self.attempts = 0
        self.first_byte_at: float | None = None
        self.call: llm_call_pb2.LlmCall | None = None
        self.history_mode = llm_call_pb2.HISTORY_MODE_AS_DEPLOYED
        self.history_fallback = ""
        self.on_succeeded: Callable[[CallCapture], None] | None = None
        """Called once a call that succeeded is recorded (exact_history remembers its sequence)."""
        self.on_recorded: Callable[[llm_call_pb2.LlmCall], None] | None = None
        """Called once the call is recorded, whatever its outcome (a capped session counts its tokens)."""
        self.session_cap = ""
        """The cap a refused call's session had reached (CALL_OUTCOME_SESSION_CAPPED)."""

    @property
    def session_id(self) -> str:
        return self.request.session.session_id

    @property
    def streamed(self) -> bool:
        return bool(self.request.body.get("stream"))

    def upstream(self, replica: str, attempts: int, first_byte_at: float | None = None) -> None:
        """Who answered, after how many attempts; a whole answer's first byte is when its headers came."""
        self.replica, self.attempts, self.first_byte_at = replica, attempts, first_byte_at

    def first_byte(self) -> None:
        if self.first_byte_at is None:
            self.first_byte_at = time.time()

    def add_response(self, response: dict[str, Any]) -> None:
        """Record a whole answer and take out of it what capture added (see CallRecorder.add_chunk)."""
        self.recorder.add_response(response)

    def add_chunk(self, chunk: dict[str, Any]) -> None:
        """Record a stream chunk and take out of it what capture added (see CallRecorder.add_chunk)."""
        self.recorder.add_chunk(chunk)

    async def finish(
        self, outcome: llm_call_pb2.CallOutcome, error_message: str = ""
    ) -> llm_call_pb2.LlmCall:
        """Record the call; returns once the sink has it (durable, under durability "before")."""
        call = self._record(outcome, error_message)
        await self.sink.submit(call)
        return call

    def finish_nowait(
        self, outcome: llm_call_pb2.CallOutcome, error_message: str = ""
    ) -> llm_call_pb2.LlmCall:
        """Record the call without waiting: for a stream the agent left, whose relay cannot await."""
        call = self._record(outcome, error_message)
        self.sink.submit_nowait(call)
        return call

    def log_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "session_id": self.session_id,
            "model": self.model,
            "stream": self.streamed,
        }
        if self.served_model != self.model:
            fields["served_model"] = self.served_model
        if self.history_fallback:
            fields["history_fallback"] = self.history_fallback
        if self.replica:
            fields["replica"] = self.replica
        if self.call is not None:
            fields["prompt_tokens"] = self.call.usage.prompt_tokens
            fields["completion_tokens"] = self.call.usage.completion_tokens
        return fields

    def _record(
        self, outcome: llm_call_pb2.CallOutcome, error_message: str
    ) -> llm_call_pb2.LlmCall:
        if self.call is not None:
            raise RuntimeError(
                f"call {self.call.call_id} of session {self.session_id!r} was recorded already"
            )
        self.call = self.recorder.to_call(
            model=self.model, policy_version=self.policy_version, replica=self.replica, kind=self.kind,
            started_at=self.started_at, first_byte_at=self.first_byte_at,
            upstream_seconds=time.time() - self.started_at, attempts=self.attempts, outcome=outcome,
            error_message=error_message, streamed=self.streamed, call_id=self.call_id,
        )  # fmt: skip
        if self.served_model != self.model:
            self.call.served_model = self.served_model
        self.call.history_mode = self.history_mode
        self.call.history_fallback = self.history_fallback
        self.call.session_cap = self.session_cap
        if self.on_recorded is not None:
            self.on_recorded(self.call)
        if outcome == llm_call_pb2.CALL_OUTCOME_SUCCEEDED and self.on_succeeded is not None:
            self.on_succeeded(self)
        return self.call

"""A call on its way upstream (ChatCall) and its answer (Forwarded), as every endpoint and backend sees them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from parity.api.common.v1 import llm_call_pb2
from parity.core.session_slug import SessionRef
from parity.services.ingest.capture.call_capture import CallCapture


@dataclass
class ChatCall:
    """One call as it goes upstream, and what is recorded of it."""

    endpoint: llm_call_pb2.CallEndpoint
    """The endpoint the agent called (recorded); COMPLETIONS goes to /v1/completions, the rest to chat."""
    body: dict[str, Any]
    """The chat or completions body for vLLM; ingest adds what capture needs."""
    raw_request: bytes
    """The agent's request as it sent it: recorded as the call's request."""
    session: SessionRef
    metadata: dict[str, str]
    model: str
    """The model the agent asked for."""
    served_model: str
    """The model that serves it (`model`, unless an alias mapped it)."""
    started_at: float = field(default_factory=time.time)


Render = Callable[[dict[str, Any]], bytes]
"""An endpoint's events for one recorded answer chunk, joined (empty for none)."""


class StreamFailed(Exception):
    """The upstream's stream broke off; the call is recorded as an upstream error with this message."""


@dataclass
class Forwarded:
    """The answer to a ChatCall: exactly one of `response`, `error_body` and `stream` is set."""

    capture: CallCapture
    status: int = 200
    response: dict[str, Any] | None = None
    """A whole 200 answer, recorded."""
    error_body: bytes = b""
    """The upstream's non-200 answer as it sent it, recorded as an upstream error."""
    stream: Callable[[Render], AsyncGenerator[bytes, None]] | None = None
    """A stream's events: called once with the endpoint's renderer, it yields what each network read rendered to,
    every chunk rendered as soon as it is recorded; raises StreamFailed if the upstream breaks off. Close it when
    done. Under load one read holds many chunks; kept as objects until the endpoint saw the whole read, they cost
    throughput in allocator and garbage-collector work (docs/design/ingest-mixed-load.md)."""
    abandon: Callable[[], None] | None = None
    """Stops the stream at once, even while it waits on a silent upstream (the agent left)."""


async def render_batches(
    batches: AsyncGenerator[list[dict[str, Any]], None], render: Render
) -> AsyncGenerator[bytes, None]:
    """A stream that makes each read's chunks together (derendered, or from a provider's SDK) as an endpoint's events."""
    async with contextlib.aclosing(batches):
        async for batch in batches:
            if events := b"".join([render(chunk) for chunk in batch]):
                yield events

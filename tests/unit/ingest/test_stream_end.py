import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from parity.services.ingest.http_api import IngestHttpApp
from parity.services.ingest.metrics import IngestMetrics
from parity.services.ingest.replies import FinalEvent, StreamReply
from parity.services.ingest.traffic_gate import TrafficGate


class _Capture:
    def log_fields(self) -> dict[str, Any]:
        return {}


async def _sent_for(events: list[bytes]) -> tuple[list[dict[str, Any]], bool, dict[str, Any]]:
    closed = False

    async def stream() -> AsyncGenerator[bytes, None]:
        nonlocal closed
        try:
            for event in events:
                yield event
        finally:
            closed = True

    async def produce() -> StreamReply:
        return StreamReply(stream(), _Capture())  # type: ignore[arg-type]

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the agent stays
        return {"type": "http.disconnect"}

    app = IngestHttpApp(None, TrafficGate(), IngestMetrics(*[lambda: 0] * 8), None, 1024)  # type: ignore[arg-type]
    _, fields = await app._respond(send, receive, "/v1/chat/completions", produce())
    return [m for m in sent if m["type"] == "http.response.body"], closed, fields()


@pytest.mark.parametrize("failed", [False, True])
async def test_a_streams_final_event_goes_out_with_the_end_of_the_response(failed: bool) -> None:
    events = [b"data: 1\n\n", b"data: error\n\n"] if failed else [b"data: 1\n\n"]
    bodies, closed, fields = await _sent_for([*events, FinalEvent(b"data: [DONE]\n\n")])
    assert [(m["body"], m["more_body"]) for m in bodies] == [(e, True) for e in events] + [
        (b"data: [DONE]\n\n", False)
    ]
    assert closed and "disconnected" not in fields


async def test_a_stream_without_a_final_event_is_ended_by_an_empty_write() -> None:
    bodies, closed, _ = await _sent_for([b"data: 1\n\n"])
    assert [(m["body"], m.get("more_body", False)) for m in bodies] == [
        (b"data: 1\n\n", True),
        (b"", False),
    ]
    assert closed

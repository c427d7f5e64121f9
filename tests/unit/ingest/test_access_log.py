import json
from typing import Any

import pytest

from parity.services.ingest.http_api import IngestHttpApp
from parity.services.ingest.metrics import IngestMetrics
from parity.services.ingest.traffic_gate import TrafficGate
from parity.services.runtime.structured_logging import configure_logging

pytestmark = pytest.mark.usefixtures("restore_logging")


async def _get_health(app: IngestHttpApp) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    await app({"type": "http", "path": "/health", "method": "GET", "headers": []}, receive, send)
    return sent


def _app() -> IngestHttpApp:
    return IngestHttpApp(None, TrafficGate(), IngestMetrics(*[lambda: 0] * 8), None, 1024)  # type: ignore[arg-type]


async def test_each_request_is_one_access_log_line_at_info(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("info", "json")
    app = _app()
    sent = await _get_health(app)
    assert sent[0]["status"] == 200
    (line,) = [json.loads(text) for text in capsys.readouterr().err.splitlines()]
    assert (
        line["event"] == "request"
        and line["path"] == "/health"
        and line["status"] == 200
        and "latency_ms" in line
    )


async def test_above_info_a_requests_log_fields_are_not_even_gathered(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    configure_logging("warning", "json")
    app = _app()
    gathered: list[int] = []
    respond = app._respond

    async def respond_counting(*args: Any) -> tuple[int, Any]:
        status, fields = await respond(*args)

        def counted_fields() -> Any:
            gathered.append(1)
            return fields()

        return status, counted_fields

    monkeypatch.setattr(app, "_respond", respond_counting)
    await _get_health(app)
    assert not gathered and not capsys.readouterr().err
    configure_logging("info", "json")
    await _get_health(app)
    assert gathered == [1]

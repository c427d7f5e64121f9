import json
import logging

import pytest
import structlog

from parity.services.runtime.structured_logging import configure_logging

pytestmark = pytest.mark.usefixtures("restore_logging")


def lines(captured: str) -> list[dict]:
    return [json.loads(line) for line in captured.splitlines()]


def test_lines_are_json_with_level_time_and_process_fields(capsys) -> None:
    configure_logging("info", "json", service="store")
    structlog.get_logger("parity.test").info("request", status=200, latency_ms=1.5)
    logging.getLogger("grpc").warning("from the standard library")
    ours, theirs = lines(capsys.readouterr().err)
    assert ours["event"] == "request" and ours["status"] == 200 and ours["level"] == "info"
    assert ours["service"] == theirs["service"] == "store" and ours["timestamp"].endswith("Z")
    assert theirs["event"] == "from the standard library" and theirs["logger"] == "grpc"


def test_a_disabled_level_is_dropped_before_any_processing(capsys, monkeypatch) -> None:
    configure_logging("warning", "json")
    stamped = []

    def stamp(self: object, _: object, __: object, event: dict) -> dict:
        stamped.append(event)
        return event

    monkeypatch.setattr(structlog.processors.TimeStamper, "__call__", stamp)
    log = structlog.get_logger("parity.test")
    log.info("request", status=200)
    log.warning("store_unreachable_spooling")
    (line,) = lines(capsys.readouterr().err)
    assert line["event"] == "store_unreachable_spooling"
    assert [event["event"] for event in stamped] == ["store_unreachable_spooling"]

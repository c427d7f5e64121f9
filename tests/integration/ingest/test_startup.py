import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = [pytest.mark.timeout(120)]


def test_an_http_port_in_use_stops_ingest_with_the_reason(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "parity.cli", "ingest", "serve", "--port", str(free_port()),
             "--http-port", str(port), "--upstreams", "http://127.0.0.1:9", "--store", "127.0.0.1:9",
             "--spool-path", str(tmp_path / "spool.db")],
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"cannot serve HTTP on 127.0.0.1:{port}" in output and "Address already in use" in output
    assert "Unclosed" not in output, "what ingest had started is closed again"


def test_a_grpc_port_in_use_stops_ingest_before_it_serves_http(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "parity.cli", "ingest", "serve", "--port", str(port),
             "--http-port", str(free_port()), "--upstreams", "http://127.0.0.1:9", "--store", "127.0.0.1:9",
             "--spool-path", str(tmp_path / "spool.db")],
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in output
    assert "http_listening" not in output and "Unclosed" not in output

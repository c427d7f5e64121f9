import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = [pytest.mark.timeout(120)]


@pytest.mark.parametrize(
    ("taken_flag", "reason"),
    [
        ("--http-port", "cannot serve HTTP on 127.0.0.1:{port}: .*Address already in use"),
        # Taken first, so nothing else was started: the HTTP port never opens.
        ("--port", "cannot listen on 127.0.0.1:{port}"),
    ],
)
def test_a_port_in_use_stops_ingest_with_the_reason_and_nothing_left_open(
    tmp_path: Path, taken_flag: str, reason: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"--port": str(free_port()), "--http-port": str(free_port())} | {
            taken_flag: str(port)
        }
        result = subprocess.run(
            [sys.executable, "-m", "parity.cli", "ingest", "serve", *(arg for item in ports.items() for arg in item),
             "--upstreams", "http://127.0.0.1:9", "--store", "127.0.0.1:9", "--spool-path", str(tmp_path / "spool.db")],
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert re.search(reason.format(port=port), output), output
    assert "Unclosed" not in output, "what ingest had started is closed again"
    if taken_flag == "--port":
        assert "http_listening" not in output

"""Shared test plumbing: repository paths and free ports."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

pytest_plugins = [
    "tests.integration.vllm_fixtures",
    "tests.integration.service_fixtures",
    "tests.integration.postgres_fixtures",
    "tests.integration.stack_fixtures",
    "tests.integration.tcp_relay",
]

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def port() -> int:
    return free_port()

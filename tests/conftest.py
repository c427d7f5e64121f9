"""Shared test plumbing: repository paths and free ports."""

from __future__ import annotations

import logging
import os
import random
import socket
from collections.abc import Iterator
from pathlib import Path

import hypothesis
import pytest
import structlog

from parity.services.inference.packaged_models import CACHE_ENV
from parity.services.trainer.compute_defaults import CPU_BF16_ENV

# `dtype auto` is bfloat16 on a CPU with bfloat16 units and float32 on one without; the suite's
# expectations are float32's wherever a test does not name bfloat16 (the bfloat16 tests do), so they
# hold on either kind of CI machine. Set before any service starts: they inherit it.
os.environ[CPU_BF16_ENV] = "0"

# Hypothesis fails an example that takes over 200 ms; on 2 shared cores beside a vLLM that is load, not a bug.
hypothesis.settings.register_profile("parity", deadline=None)
hypothesis.settings.load_profile("parity")

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


def free_port_run(count: int) -> int:
    """The first of `count` consecutive free ports, below the kernel's ephemeral range.

    A run inside that range can be taken between this check and the bind by any process's outgoing connection or
    port-0 listener (vLLM opens several); below it only an explicit bind can take one.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for first in random.sample(range(10_000, low - count), 200):
        if all(_bindable(first + n) for n in range(count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports below {low}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """For tests that configure logging: the root logger's handlers and level, and structlog's defaults, as before."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Named models (`--model smollm2-135m-instruct`, `tiny-test`) are prepared into the session's own cache,
    which every `parity up` and `parity train` the tests start inherits: no test reads or fills the user's."""
    cache = tmp_path_factory.mktemp("model_cache")
    os.environ[CACHE_ENV] = str(cache)
    return cache

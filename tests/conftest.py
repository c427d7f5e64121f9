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

# Under `make test`'s workers (pytest-xdist), each worker's processes keep to a core of their own: its vLLMs are
# bound there (vLLM's CPU worker pins its threads, by default all to the first core, where two workers' vLLMs
# would take turns), and torch runs one thread per process, so two workers' training never spins on each other's
# cores. Set before any process starts or torch is imported: everything the worker starts inherits it.
if (_worker := os.environ.get("PYTEST_XDIST_WORKER", "")).startswith("gw"):
    _cores = sorted(os.sched_getaffinity(0))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(_cores[int(_worker[2:]) % len(_cores)]))
    os.environ.setdefault("OMP_NUM_THREADS", "1")

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

# Modules that start a Ray cluster of their own on this machine: one worker runs them, one after the other.
RAY_MODULES = {
    "tests/unit/trainer/backends/test_backends.py",
    "tests/integration/training/test_ray_nodes.py",
}
# Packages whose modules share package-scoped fixtures (one stack, one training run): one worker runs each whole,
# so those start once.
SHARED_FIXTURE_PACKAGES = {"tests/integration/console/", "tests/integration/training/train_api/"}


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN201 (xdist's types load with xdist only)
    """`make test` spreads the suite over workers (`--dist loadscope`) a module at a time, so a module's fixtures
    (its vLLM, its stack) start once, the Ray modules run on one worker, and so does each package whose modules
    share its fixtures."""
    if config.getvalue("dist") != "loadscope":
        return None
    from tests.module_scheduling import ModuleScheduling

    together = {module: "ray" for module in RAY_MODULES} | {
        package: package for package in SHARED_FIXTURE_PACKAGES
    }
    return ModuleScheduling(config, log, together=together)


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
    which every `parity up` and `parity train` the tests start inherits: no test reads or fills the user's. The
    workers of one `make test` share it (preparing a model locks the cache), so the real model is prepared once."""
    if _worker:
        cache = tmp_path_factory.getbasetemp().parent / "model_cache"
        cache.mkdir(exist_ok=True)
    else:
        cache = tmp_path_factory.mktemp("model_cache")
    os.environ[CACHE_ENV] = str(cache)
    return cache

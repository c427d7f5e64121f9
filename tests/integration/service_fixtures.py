"""Real service processes on free ports, as `parity <service> serve` runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from parity.clients.transport import ChannelSecurity, open_channel
from tests.conftest import free_port
from tests.waiting import eventually

# A service reports serving in a few seconds; the trainer imports torch and verl first, which on 2 cores shared
# with a vLLM and a training run has taken over 30 s. Only a service that never comes up waits this long.
HEALTH_TIMEOUT_S = 90.0


@dataclass
class RunningService:
    name: str
    address: str
    process: subprocess.Popen[str]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 15.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def wait_for_health(
    address: str,
    process: subprocess.Popen[str],
    log_path: Path,
    timeout: float,
    security: ChannelSecurity | None = None,
) -> None:
    """Poll grpc.health.v1 until SERVING; fail fast with the log if the process exits."""
    with open_channel(address, security=security or ChannelSecurity()) as channel:
        stub = health_pb2_grpc.HealthStub(channel)

        def serving() -> bool:
            if process.poll() is not None:
                pytest.fail(
                    f"service at {address} exited with {process.returncode}:\n{log_path.read_text()}"
                )
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0).status  # type: ignore[attr-defined]  # types-grpcio-health-checking's HealthStub declares no methods
                return status == health_pb2.HealthCheckResponse.SERVING
            except grpc.RpcError:
                return False

        eventually(serving, timeout_s=timeout, interval_s=0.1,
                   what=lambda: f"service at {address} serving; its log:\n{log_path.read_text()}\n")  # fmt: skip


class ServiceLauncher:
    """Starts `parity <service> serve` processes on free ports and stops them all at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[RunningService] = []

    def start(
        self,
        name: str,
        *extra_args: str,
        port: int | None = None,
        environment: dict[str, str] | None = None,
        security: ChannelSecurity | None = None,
    ) -> RunningService:
        """`environment` is added to this process's; `security` is how the health check reaches a TLS service."""
        port = port or free_port()
        log_path = self.log_dir / f"{name}-{port}.log"
        with log_path.open(
            "a"
        ) as log_file:  # a service restarted on its port goes on in the same log
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "parity.cli",
                    name,
                    "serve",
                    "--port",
                    str(port),
                    "--log-format",
                    "json",
                    *extra_args,
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                text=True,
                env=os.environ | (environment or {}),
            )
        service = RunningService(name, f"127.0.0.1:{port}", process, log_path)
        self.started.append(service)
        wait_for_health(service.address, process, log_path, HEALTH_TIMEOUT_S, security)
        return service

    def stop_all(self) -> None:
        for service in reversed(self.started):
            service.terminate()


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator:
    """Factory: start_service("store", "--url", "memory://") -> RunningService."""
    launcher = ServiceLauncher(tmp_path)
    yield launcher.start
    launcher.stop_all()


@pytest.fixture(scope="module")
def module_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceLauncher]:
    """A launcher whose services live as long as the test module."""
    launcher = ServiceLauncher(tmp_path_factory.mktemp("services"))
    yield launcher
    launcher.stop_all()

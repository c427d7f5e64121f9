"""A stack's processes: each Parity service as its own process (`parity SERVICE serve`), waited on until it
answers its health check, stopped on request. `parity up` runs its stack from these; so can any program that
lays out a deployment of its own (examples/production).
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import structlog

from parity.clients.health import HealthClient
from parity.services.inference.parent_death import die_with_parent

log = structlog.get_logger(__name__)


class StackError(RuntimeError):
    """A process of the stack did not come up, or went down."""


class StartupInterrupted(Exception):
    """Ctrl-C or SIGTERM arrived before the stack was up."""


def free_port() -> int:
    """A loopback port free now, for a process to listen on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ServiceProcess:
    """One service, `parity SERVICE serve` listening on `address`, its output in `log_path`."""

    name: str
    address: str
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    service: str = ""
    """The `parity SERVICE serve` it runs; `name` when empty (several ingests are ingest-0, ingest-1, ...)."""

    @property
    def kind(self) -> str:
        return self.service or self.name

    @property
    def url(self) -> str:
        return f"grpc://{self.address}"

    def start(
        self, extra_args: list[str], environment: dict[str, str], cpus: frozenset[int] | None = None
    ) -> None:
        """`cpus`: the cores it may run on; every core when None."""
        host, port = self.address.rsplit(":", 1)
        command = [
            sys.executable,
            "-m",
            "parity.cli",
            self.kind,
            "serve",
            "--host",
            host,
            "--port",
            port,
        ]
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                [*command, "--log-format", "json", *extra_args],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                # Own session, so Ctrl-C reaches only the supervisor, which stops
                # services in order; the death signal stops them if it is killed.
                start_new_session=True,
                preexec_fn=functools.partial(_prepare_child, cpus),
                env=os.environ | environment,
            )

    def wait_healthy(self, deadline: float, stop_requested: threading.Event) -> None:
        health = HealthClient(self.address)
        while not stop_requested.is_set():
            self.raise_if_exited()
            if health.serving(timeout_s=1.0):
                return
            if time.monotonic() > deadline:
                raise StackError(
                    f"{self.name} did not become healthy at {self.address}; see {self.log_path}"
                )
            time.sleep(0.2)
        raise StartupInterrupted

    def raise_if_exited(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise StackError(
                f"{self.name} exited with code {self.process.returncode}; last log lines:\n{_tail(self.log_path)}"
            )

    def stop(self, grace_s: float) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            log.warning("service_killed", service=self.name, after_s=grace_s)
            self.process.kill()
            self.process.wait()


class ConsoleProcess(ServiceProcess):
    """The web console: HTTP, so its health is its /healthz page."""

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def wait_healthy(self, deadline: float, stop_requested: threading.Event) -> None:
        while not stop_requested.is_set():
            self.raise_if_exited()
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise StackError(
                    f"{self.name} did not answer at {self.url}/healthz; see {self.log_path}"
                )
            time.sleep(0.2)
        raise StartupInterrupted


def _prepare_child(cpus: frozenset[int] | None) -> None:
    """In the child before it runs: die with its parent, and keep to `cpus`."""
    die_with_parent()
    if cpus:
        os.sched_setaffinity(0, cpus)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"

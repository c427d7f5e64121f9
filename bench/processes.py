"""The processes of a benchmark's setups: started, each waited on until it answers, all stopped together; a store
with one ingest or several in front of an upstream, plain or with tokens and TLS; and the CPU they spend."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from parity.services.stack.local_ca import LocalCertificateAuthority

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# Before each load, the processes under test must have used less than this share of
# one core over the last window.
IDLE_WINDOW_S = 0.5
IDLE_CPU_SHARE = 0.1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class Secured:
    """Tokens checked everywhere, and TLS when certificates are given: what authentication and TLS cost."""

    label: str
    table_file: str
    service_token: str
    agent_token: str
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    @classmethod
    def make(cls, scratch: Path, label: str, tls: bool) -> Secured:
        tokens = {role: secrets.token_urlsafe(32) for role in ("agent", "service")}
        table = scratch / f"tokens-{label}"
        table.write_text("".join(f"{role} {token}\n" for role, token in tokens.items()))
        files: dict[str, str] = {}
        if tls:
            authority = LocalCertificateAuthority(scratch / f"tls-{label}")
            cert_file, key_file = authority.issue("bench")
            files = {
                "ca_file": str(authority.ca_file),
                "cert_file": cert_file,
                "key_file": key_file,
            }
        return cls(label, str(table), tokens["service"], tokens["agent"], **files)

    def server_flags(self) -> list[str]:
        flags = ["--auth-tokens-file", self.table_file]
        return flags + (
            ["--tls-cert-file", self.cert_file, "--tls-key-file", self.key_file]
            if self.cert_file
            else []
        )

    def client_env(self) -> dict[str, str]:
        return {"PARITY_TOKEN": self.service_token} | (
            {"PARITY_TLS_CA_FILE": self.ca_file} if self.ca_file else {}
        )


class Processes:
    """The processes of one setup; all stopped together."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.running: list[subprocess.Popen[bytes]] = []
        self.names: list[str] = []

    def start(self, name: str, command: list[str], ready_url: str | None = None, env: dict[str, str] | None = None,
              timeout: float = 120) -> None:  # fmt: skip
        log = self.scratch / f"{name}.log"
        process = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                   env=os.environ | (env or {}), start_new_session=True)  # fmt: skip
        self.running.append(process)
        self.names.append(name)
        deadline = time.monotonic() + timeout
        while ready_url:
            if process.poll() is not None:
                raise SystemExit(f"{name} exited; see {log}")
            try:
                # verify=False: the secured setups' certificates are the bench's own throwaway CA's.
                if (
                    httpx.get(
                        ready_url,
                        timeout=1,
                        headers={"Authorization": "Bearer sk-bench"},
                        verify=False,
                    ).status_code
                    == 200
                ):
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} not ready after {timeout} s; see {log}")
            time.sleep(0.3)

    def start_stub(self) -> str:
        """The instant vLLM-shaped upstream (fake_upstream.py) on a free port; returns its URL."""
        port = free_port()
        self.start("stub", [PYTHON, str(REPO / "bench" / "fake_upstream.py"), "--port", str(port)],
                   f"http://127.0.0.1:{port}/v1/models")  # fmt: skip
        return f"http://127.0.0.1:{port}"

    def start_parity(
        self, upstream: str, durability: str = "before", secured: Secured | None = None
    ) -> str:
        """A store and an ingest in front of `upstream`; returns ingest's OpenAI base URL. `secured`: both check
        tokens (ingest writes to the store with a service token), and with certificates serve TLS too."""
        label = secured.label if secured else durability
        store_port, ingest_port, http_port = free_port(), free_port(), free_port()
        security = secured.server_flags() if secured else []
        self.start(f"store-{label}", [PYTHON, "-m", "parity.cli", "store", "serve", "--port", str(store_port),
                                      "--url", f"sqlite:///{self.scratch}/store-{label}.db",
                                      "--log-level", "warning", *security])  # fmt: skip
        scheme = "https" if secured and secured.cert_file else "http"
        self.start(f"ingest-{label}", [PYTHON, "-m", "parity.cli", "ingest", "serve", "--port", str(ingest_port),
                                        "--http-port", str(http_port), "--upstreams", upstream,
                                        "--store", f"127.0.0.1:{store_port}", "--durability", durability,
                                        "--spool-path", str(self.scratch / f"spool-{label}.db"),
                                        "--log-level", "warning", *security],
                   f"{scheme}://127.0.0.1:{http_port}/health", env=secured.client_env() if secured else None)  # fmt: skip
        deadline = time.monotonic() + 30
        headers = {"Authorization": f"Bearer {secured.agent_token}"} if secured else {}
        while not httpx.get(
            f"{scheme}://127.0.0.1:{http_port}/v1/models", headers=headers, verify=False
        ).json()["data"]:
            if time.monotonic() > deadline:
                raise SystemExit("ingest never saw its upstream healthy")
            time.sleep(0.2)
        return f"{scheme}://127.0.0.1:{http_port}/v1"

    def start_ingests(
        self, upstream: str, count: int, env: dict[str, str] | None = None
    ) -> tuple[str, list[str]]:
        """A store and `count` ingests sharing one HTTP port (SO_REUSEPORT, as `parity up --ingests` runs them);
        returns the port's OpenAI base URL and the ingests' names. `env` runs them from another code tree."""
        store_port, http_port = free_port(), free_port()
        label = f"x{count}"
        self.start(f"store-{label}", [PYTHON, "-m", "parity.cli", "store", "serve", "--port", str(store_port),
                                      "--url", f"sqlite:///{self.scratch}/store-{label}.db", "--log-level", "warning"],
                   env=env)  # fmt: skip
        # One ingest needs no shared port (and trees older than the flag do not know it).
        shared = ["--http-reuse-port"] if count > 1 else []
        names = [f"ingest-{label}-{n}" for n in range(count)]
        for name in names:
            self.start(name, [PYTHON, "-m", "parity.cli", "ingest", "serve", "--port", str(free_port()),
                              "--http-port", str(http_port), *shared, "--upstreams", upstream,
                              "--store", f"127.0.0.1:{store_port}", "--spool-path", str(self.scratch / f"spool-{name}.db"),
                              "--log-level", "warning"], f"http://127.0.0.1:{http_port}/health", env=env)  # fmt: skip
        # Each must have seen the upstream before any is loaded: ask until every one has answered a model list.
        deadline = time.monotonic() + 30
        seen = 0
        while seen < 4 * count:
            if time.monotonic() > deadline:
                raise SystemExit("the ingests never saw their upstream healthy")
            with httpx.Client() as client:  # a new connection: the kernel picks the ingest
                seen = (
                    seen + 1
                    if client.get(f"http://127.0.0.1:{http_port}/v1/models").json()["data"]
                    else 0
                )
            time.sleep(0.05)
        return f"http://127.0.0.1:{http_port}/v1", names

    def pids(self, names: list[str]) -> set[int]:
        return {
            process.pid
            for process, name in zip(self.running, self.names, strict=True)
            if name in names
        }

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until none of these processes is busy. A proxy works on after wrk stops,
        through the requests wrk gave up waiting for (LiteLLM's proxy keeps a core busy
        for over 10 s after 3 s of 256 streams), and would take that core from whatever
        is measured next."""
        groups = {process.pid for process in self.running}
        deadline = time.monotonic() + timeout
        used = cpu_seconds(groups)
        while time.monotonic() < deadline:
            time.sleep(IDLE_WINDOW_S)
            now = cpu_seconds(groups)
            if now - used < IDLE_WINDOW_S * IDLE_CPU_SHARE:
                return
            used = now
        print(
            f"warning: the setups were still busy after {timeout:.0f} s; measuring anyway",
            file=sys.stderr,
        )

    def stop(self) -> None:
        for process in reversed(self.running):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        self.running.clear()
        self.names.clear()


def cpu_seconds(process_groups: set[int]) -> float:
    """CPU time used so far by every process in the given process groups."""
    ticks = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # exited since the scan began
            continue
        if int(fields[2]) in process_groups:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")

"""The embedded stack: `parity up` on free ports for one run, stopped when the run ends.

It is the same `parity up` a user runs by hand (store, ingest, assembler, trainer and
vLLM, each its own process), so a run trained this way exercises what a deployment
runs. Its state lives in RUN_DIR/stack: the store and the logs, so resuming a run
finds everything it left; the model comes from its folder or the model cache. A
distillation teacher named by model or folder gets a vLLM of its own (`teacher_server`),
started beside `parity up` and stopped with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import httpx
import structlog

from parity.services.inference.parent_death import die_with_parent
from parity.services.inference.vllm_launcher import VllmExitedError, VllmServer
from parity.services.stack import StackError, free_port
from parity.services.trainer.compute_defaults import dtype_reason, resolve_dtype
from parity.training.settings import StackAddresses, TrainSettings
from parity.training.teacher_server import teacher_server, warm_up

SERVICES = ("store", "ingest", "assembler", "trainer")
READY_LINE = "Press Ctrl-C"
STOP_GRACE_S = 120.0

log = structlog.get_logger()


@dataclass
class LocalStack:
    data_dir: Path
    model: Path
    """The model folder vLLM serves and the trainer trains."""
    vllm_dtype: str = "float32"
    """The dtype vLLM serves in: the run's own, so the sync probe compares like with like."""
    lora_rank: int = 0
    """A LoRA run's rank, which vLLM must serve adapters of; 0 for a run that trains the whole model."""
    model_aliases: str | None = None
    """Comma-separated PATTERN=MODEL rules for ingest; None: `parity up`'s default (CLI agents' vendor names)."""
    max_model_len: int | None = None
    """vLLM's context length; None: `parity up`'s default."""
    teacher: Path | None = None
    """A distillation teacher's model folder, served beside the stack; None: none to serve here."""

    @classmethod
    def for_run(
        cls, data_dir: Path, settings: TrainSettings, model: Path, teacher: Path | None = None
    ) -> LocalStack:
        # vLLM serves what `auto` resolves to on this machine, the dtype the run then takes from it.
        log.info("compute_dtype", detail=dtype_reason(settings.dtype))
        return cls(data_dir, model, vllm_dtype=resolve_dtype(settings.dtype), lora_rank=settings.lora_rank,
                   model_aliases=settings.model_aliases, max_model_len=settings.max_model_len, teacher=teacher)  # fmt: skip

    def __post_init__(self) -> None:
        self.ports = {name: free_port() for name in (*SERVICES, "vllm", "http", "console")}
        self.teacher_port = free_port()
        self.process: subprocess.Popen[str] | None = None
        self._output: deque[str] = deque(maxlen=40)
        self._teacher: VllmServer | None = None

    @property
    def teacher_url(self) -> str:
        return f"http://127.0.0.1:{self.teacher_port}"

    @property
    def model_path(self) -> Path:
        return self.model.resolve()

    @property
    def addresses(self) -> StackAddresses:
        return StackAddresses(
            ingest_url=f"http://127.0.0.1:{self.ports['http']}", assembler=f"127.0.0.1:{self.ports['assembler']}",
            trainer=f"127.0.0.1:{self.ports['trainer']}", store=f"127.0.0.1:{self.ports['store']}",
        )  # fmt: skip

    @property
    def console_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['console']}"

    def token(self, role: str) -> str:
        """The stack's token of `role` (read, agent, service, admin), as `parity up` generated it."""
        return (self.data_dir / "tokens" / f"{role}.token").read_text().strip()

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    def command(self) -> list[str]:
        """The `parity up` this stack runs."""
        command = [sys.executable, "-m", "parity.cli", "up", "--data-dir", str(self.data_dir)]
        command += ["--model", str(self.model)]
        command += ["--vllm-dtype", self.vllm_dtype]
        command += ["--vllm-lora-rank", str(self.lora_rank)] if self.lora_rank else []
        command += ["--model-aliases", self.model_aliases] if self.model_aliases is not None else []
        command += (
            ["--max-model-len", str(self.max_model_len)] if self.max_model_len is not None else []
        )
        return command + [
            arg for name, port in self.ports.items() for arg in (f"--{name}-port", str(port))
        ]

    def start(self, timeout_s: float, cancelled: threading.Event | None = None) -> None:
        """Returns once agents can call; raises StackError with `parity up`'s last words if it exits first."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.teacher is not None:
            self._teacher = teacher_server(self.teacher, self.teacher_port, self.vllm_dtype, self.max_model_len,
                                           self.log_dir / "teacher-vllm.log")  # fmt: skip
            self._teacher.start()
        with (self.log_dir / "up.log").open("ab") as stderr:
            self.process = subprocess.Popen(
                self.command(), stdout=subprocess.PIPE, stderr=stderr, text=True,
                # Its own session: Ctrl-C reaches `parity train`, which stops the run before the
                # stack; the death signal takes the stack down if `parity train` is killed.
                start_new_session=True, preexec_fn=die_with_parent,
            )  # fmt: skip
        ready = threading.Event()
        reader = threading.Thread(
            target=self._read_output, args=(ready,), name="parity-up-output", daemon=True
        )
        reader.start()
        deadline = time.monotonic() + timeout_s
        while not ready.wait(0.2):
            if self.process.poll() is not None:
                reader.join(2)
                raise StackError(
                    self._failure(f"parity up exited with code {self.process.returncode}")
                )
            if cancelled is not None and cancelled.is_set():
                raise KeyboardInterrupt
            self._raise_if_teacher_down()
            if time.monotonic() > deadline:
                raise StackError(self._failure(f"the stack was not up after {timeout_s:g} s"))
        if self._teacher is not None:
            try:
                self._teacher.wait_healthy(max(1.0, deadline - time.monotonic()))
                warm_up(self._teacher, max(1.0, deadline - time.monotonic()))
            except (VllmExitedError, TimeoutError, httpx.HTTPError) as error:
                raise StackError(
                    f"the teacher's vLLM ({self.teacher}) did not come up: {error}"
                ) from None

    def raise_if_down(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise StackError(self._failure(f"parity up exited with code {self.process.returncode}"))
        self._raise_if_teacher_down()

    def _raise_if_teacher_down(self) -> None:
        if self._teacher is not None and self._teacher.returncode is not None:
            raise StackError(f"the teacher's vLLM ({self.teacher}) exited with code {self._teacher.returncode}:\n"
                             f"{self._teacher.log_tail()}")  # fmt: skip

    def stop(self) -> int | None:
        if self._teacher is not None:
            self._teacher.stop()
            self._teacher = None
        process, self.process = self.process, None
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        return process.returncode

    def _read_output(self, ready: threading.Event) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self._output.append(line.rstrip())
            if line.startswith(READY_LINE):
                ready.set()

    def _failure(self, reason: str) -> str:
        said = "\n".join(self._output) or "(nothing on stdout)"
        return f"{reason}; logs in {self.log_dir}. Its output:\n{said}\nLast of up.log:\n{_tail(self.log_dir / 'up.log')}"


def served_model(ingest_url: str, api_key: str) -> str:
    """The model name agents ask for: what ingest lists first."""
    try:
        models = httpx.get(
            f"{ingest_url}/v1/models", timeout=30, headers={"Authorization": f"Bearer {api_key}"}
        ).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError) as error:
        raise StackError(f"ingest at {ingest_url} lists no model: {error}") from None
    if not models:
        raise StackError(f"ingest at {ingest_url} lists no model; is a vLLM replica up behind it?")
    return str(models[0]["id"])


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(none)"

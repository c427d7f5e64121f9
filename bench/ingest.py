"""Benchmark: what ingest adds on the request path, against direct calls and LiteLLM's proxy.

    .venv/bin/python bench/ingest.py [--quick]

Needs wrk (`apt-get install wrk`) and LiteLLM's proxy (`.venv/bin/pip install -e '.[bench]'`).

Three setups in front of the same fast vLLM-shaped stub (bench/fake_upstream.py),
loaded by wrk, non-streaming and streaming, at 1, 32 and 256 connections:
  direct   wrk -> stub
  parity   wrk -> `parity ingest serve` -> stub, capturing every call into a real
           `parity store serve` (SQLite, synchronous=FULL) before answering
  litellm  wrk -> LiteLLM proxy (Router, model_list) with a capture callback -> stub
wrk keeps every connection busy, so latency there is queueing at saturation; a
paced run (each connection waits a random 10 to 30 ms between requests) measures
what ingest adds to a request's latency when it is not saturated. Both are repeated at 32 connections with
durability "after", which answers before the call is in the store or the spool, and with
tokens checked by ingest and the store ("auth"), then with TLS on ingest's HTTPS and both
gRPC ports too ("tls"), each next to a plain run it is compared with.
Each load starts once every process of the setups is idle again (see wait_idle).

The same ingest also serves /v1/messages and /v1/responses, translated to chat: their
rows, non-streaming and streaming at 1, 32 and 256 connections, are compared with chat's.

A mixed row loads one ingest as agents do: 64 connections over 1,000 sessions (each request
names one in its URL), half of the requests streamed (`--mixed-only` runs just this row;
`--against TREE` runs it alternately on this checkout and on another one, a `git worktree`
of an older commit, each from a copy of its code so neither runs from an editable install
the other lacks, and prints the ratio, so both meet the same machine).

Then 1, 2 and 4 ingests share one port (SO_REUSEPORT, as `parity up --ingests N` runs
them) in front of the stub: throughput against one ingest's, and the CPU the ingests and
the store spend per call (`--scaling-only` runs just these rows).

A last run against real vLLM with the small model runs agents through ingest side by
side with agents that call vLLM directly, over chat and over vLLM's own /v1/messages. vLLM's CPU worker and engine core get their
own cores and everything else stays off them, as a CPU host should be laid out.

The last line printed is one JSON object with the headline numbers.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest_mixed import code_tree, mixed_load, print_mixed
from ingest_real_vllm import real_vllm_overhead
from ingest_report import Results, report
from ingest_scaling import ingest_scaling, print_scaling
from packaging.requirements import Requirement
from processes import PYTHON, REPO, Processes, Secured, free_port
from scratch import scratch_dir
from wrk_load import BODY, PROTOCOLS, wrk


def check_tools() -> None:
    """Say what is missing before minutes of setup, not as a baseline that dies mid-run."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    missing = []
    for spec in importlib.metadata.requires("litellm") or []:
        requirement = Requirement(spec)
        if requirement.marker is None or not requirement.marker.evaluate({"extra": "proxy"}):
            continue
        try:
            importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(requirement.name)
    if missing:
        raise SystemExit(
            f"LiteLLM's proxy lacks {', '.join(missing)}: .venv/bin/pip install -e '.[bench]'"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="short runs; finishes in under three minutes"
    )
    parser.add_argument(
        "--scaling-only", action="store_true", help="only the 1, 2 and 4 ingest rows (a minute)"
    )
    parser.add_argument(
        "--mixed-only",
        action="store_true",
        help="only the mixed row (streamed and not, many sessions)",
    )
    parser.add_argument(
        "--against", type=Path, help="with --mixed-only: also run it on this checkout, alternately"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="with --mixed-only: turns each tree takes (default 2)"
    )
    args = parser.parse_args(argv)
    if args.against is not None and not (args.against / "services" / "ingest").is_dir():
        raise SystemExit(f"--against {args.against}: not a Parity checkout (no services/ingest)")
    if args.mixed_only:
        if shutil.which("wrk") is None:
            raise SystemExit("wrk is not installed: apt-get install wrk")
        with scratch_dir("ingest-mixed") as scratch:
            trees: dict[str, dict[str, str]] = {"this": {}}
            if args.against is not None:
                # Both from copies: an A/A run of this checkout against a copy of itself read 1.05x when this
                # side ran from its editable install.
                trees = {"this": code_tree(REPO, scratch, "this"),
                         args.against.name: code_tree(args.against.resolve(), scratch, args.against.name)}  # fmt: skip
            rows = mixed_load(scratch, 3 if args.quick else 10, trees, args.rounds)
        print_mixed(rows)
        print(json.dumps({"mixed": rows}))
        return 0
    if args.scaling_only:
        if shutil.which("wrk") is None:
            raise SystemExit("wrk is not installed: apt-get install wrk")
        with scratch_dir("ingest-scaling") as scratch:
            rows = ingest_scaling(scratch, 3 if args.quick else 10)
        print_scaling(rows)
        print(json.dumps({"scaling": rows}))
        return 0
    check_tools()
    with scratch_dir("ingest") as scratch:
        return measure(args, scratch)


@dataclass
class Loads:
    """wrk against the setups, each load once every process of them is idle again (Processes.wait_idle)."""

    processes: Processes
    scratch: Path
    seconds: float
    results: Results = field(default_factory=dict)
    paced: dict[str, dict[str, float]] = field(default_factory=dict)
    """Paced runs' figures by setup: each connection waits a random pause between requests."""

    def run(self, url: str, connections: int, stream: bool = False, auth: str = "", pace_ms: int = 0,
            request: dict[str, Any] = BODY) -> dict[str, float]:  # fmt: skip
        self.processes.wait_idle()
        return wrk(url, connections, self.seconds, stream, self.scratch, auth, pace_ms, request)


def measure(args: argparse.Namespace, scratch: Path) -> int:
    seconds = 2 if args.quick else 10
    processes = Processes(scratch)
    # The small model for the real-vLLM run is made while the setups start, rather than after the loads: it takes
    # 5 to 15 s.
    model_dir, model_log = scratch / "model", scratch / "model-generate.log"
    generating = subprocess.Popen([PYTHON, "-m", "parity.cli", "model", "generate", "--out", str(model_dir)],
                                  stdout=model_log.open("wb"), stderr=subprocess.STDOUT)  # fmt: skip
    loads = Loads(processes, scratch, seconds)
    try:
        stub = processes.start_stub()
        parity_url, targets = start_setups(processes, scratch, stub)
        if generating.wait() != 0:
            raise SystemExit(f"the small model could not be made; see {model_log}")
        proxy_loads(loads, targets, parity_url)
        secured_loads(loads, stub, targets["parity"][0])
        durability_after_loads(loads, stub)
    finally:
        generating.kill()  # Only if something failed before it finished.
        generating.wait()
        processes.stop()
    scaling = ingest_scaling(scratch, seconds)
    mixed = mixed_load(scratch, seconds, {"this": {}}, rounds=1)
    overhead = real_vllm_overhead(
        scratch / "vllm", model_dir, rounds=3 if args.quick else 10, agents=6, turns=3
    )
    report(loads.results, loads.paced, scaling, mixed, overhead)
    return 0


def start_setups(
    processes: Processes, scratch: Path, stub: str
) -> tuple[str, dict[str, tuple[str, str]]]:
    """Ingest with its store, and LiteLLM's proxy with its capture callback, in front of the stub; returns ingest's
    OpenAI base URL and each setup's chat URL with the key it is called with."""
    parity_url = processes.start_parity(stub)
    litellm_port = free_port()
    config = scratch / "litellm.yaml"
    # LiteLLM imports callbacks from the config file's folder.
    shutil.copy(REPO / "bench" / "litellm_capture.py", scratch / "litellm_capture.py")
    config.write_text(
        "model_list:\n  - model_name: bench-model\n    litellm_params:\n      model: openai/bench-model\n"
        f"      api_base: {stub}/v1\n      api_key: unused\n"
        "      extra_body: {return_token_ids: true}\n"
        "litellm_settings:\n  callbacks: litellm_capture.capture_logger\n"
        "general_settings:\n  master_key: sk-bench\n"
    )
    processes.start(
        "litellm", [str(Path(PYTHON).parent / "litellm"), "--config", str(config), "--port", str(litellm_port)],
        f"http://127.0.0.1:{litellm_port}/health/liveliness", timeout=180,
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "BENCH_CAPTURE_DB": str(scratch / "litellm-capture.db")},
    )  # fmt: skip
    return parity_url, {
        "direct": (f"{stub}/v1/chat/completions", ""),
        "parity": (f"{parity_url}/chat/completions", ""),
        "litellm": (f"http://127.0.0.1:{litellm_port}/v1/chat/completions", "sk-bench"),
    }


def proxy_loads(loads: Loads, targets: dict[str, tuple[str, str]], parity_url: str) -> None:
    """Every setup at 1, 32 and 256 connections, streamed and not, ingest's other protocols beside its chat; then
    direct and ingest paced."""
    for stream in (False, True):
        for connections in (1, 32, 256):
            for setup, (url, auth) in targets.items():
                loads.results[setup, stream, connections] = loads.run(
                    url, connections, stream, auth
                )
            # Next to the chat row they are compared with, on the same ingest.
            for protocol in ("messages", "responses"):
                path, request = PROTOCOLS[protocol]
                loads.results[f"parity_{protocol}", stream, connections] = loads.run(parity_url + path, connections,
                                                                                     stream, request=request)  # fmt: skip
    for setup in ("direct", "parity"):
        # 32 connections each waiting 20 ms on average between requests: ~1,500 req/s offered, below saturation.
        loads.paced[setup] = loads.run(targets[setup][0], 32, pace_ms=20)


def secured_loads(loads: Loads, stub: str, plain_url: str) -> None:
    """Tokens checked by ingest and the store, then TLS on both too: next to the plain rows they are compared with."""
    for label, tls in (("auth", False), ("tls", True)):
        secured = Secured.make(loads.scratch, label, tls)
        url = f"{loads.processes.start_parity(stub, secured=secured)}/chat/completions"
        for stream in (False, True):
            loads.results[f"parity_plain_{label}", stream, 32] = loads.run(plain_url, 32, stream)
            loads.results[f"parity_{label}", stream, 32] = loads.run(
                url, 32, stream, secured.agent_token
            )


def durability_after_loads(loads: Loads, stub: str) -> None:
    """Durability "after": the agent is answered before its call is in the store or the spool."""
    after_url = f"{loads.processes.start_parity(stub, durability='after')}/chat/completions"
    loads.results["parity_after", False, 32] = loads.run(after_url, 32)
    loads.paced["parity_after"] = loads.run(after_url, 32, pace_ms=20)


if __name__ == "__main__":
    sys.exit(main())

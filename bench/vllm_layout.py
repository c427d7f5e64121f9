"""vLLM's process layout on a CPU host, as the launcher starts it, against vLLM's own, in one run.

The launcher runs the model inside vLLM's engine core (VLLM_ENABLE_V1_MULTIPROCESSING=0), two
processes; vLLM's CPU build on its own runs it in a worker process of a third, whose engine core
busy-polls while the worker computes. Each round starts one replica of each, alternating which goes
first, laid out as `parity up` lays them (the model's threads on every core but the last), and
measures: seconds until it answers, the CPU its processes spent getting there, and a burst of
concurrent chat calls (wall time, tokens per second, CPU seconds per thousand tokens). The compile
cache is shared, so the first start of the run compiles for both; the one-process layout goes first.

    .venv/bin/python bench/vllm_layout.py            # the default model, 3 rounds, about 7 minutes on 2 cores
    .venv/bin/python bench/vllm_layout.py --quick    # the generated test model, 2 rounds, about 4 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from scratch import scratch_dir

from parity.core.model_defaults import DEFAULT_MODEL
from parity.services.inference.cpu_build import cpu_layout
from parity.services.inference.engine_core_placement import descendants
from parity.services.inference.packaged_models import resolve_model
from parity.services.inference.tiny_model import generate_tiny_model
from parity.services.inference.vllm_launcher import (
    VllmLaunchConfig,
    VllmServer,
    vllm_python,
)
from parity.services.stack import free_port

LAYOUTS = {"one process": "0", "vLLM's default": "1"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(root: int) -> float:
    """CPU seconds spent so far by `root` and every live process below it."""
    total = 0.0
    for pid in (root, *descendants(root)):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


def burst(server: VllmServer, calls: int, max_tokens: int) -> tuple[float, int]:
    """`calls` chat calls at once, each generating exactly `max_tokens`: (wall seconds, tokens generated)."""
    body = {"model": server.model_name, "max_tokens": max_tokens, "min_tokens": max_tokens, "temperature": 1.0,
            "logprobs": True}  # fmt: skip

    def one(n: int) -> int:
        messages = [{"role": "user", "content": f"Tell me a story about the number {n}."}]
        answer = httpx.post(f"{server.openai_base_url}/chat/completions", json=body | {"messages": messages, "seed": n},
                            timeout=600)  # fmt: skip
        answer.raise_for_status()
        return int(answer.json()["usage"]["completion_tokens"])

    started = time.perf_counter()
    with ThreadPoolExecutor(calls) as pool:
        tokens = sum(pool.map(one, range(calls)))
    return time.perf_counter() - started, tokens


def measure(
    model: Path, work: Path, multiprocessing: str, calls: int, max_tokens: int
) -> dict[str, float]:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = multiprocessing
    layout = cpu_layout(vllm_python())
    config = VllmLaunchConfig(model_path=model, port=free_port(), log_path=work / f"vllm-{time.time_ns()}.log",
                              served_model_name="bench", worker_cpus=layout.worker_bind if layout else None)  # fmt: skip
    started = time.perf_counter()
    with VllmServer(config) as server:
        healthy_s = time.perf_counter() - started
        process = server._process  # noqa: SLF001 - the process tree is what is measured
        assert process is not None  # entering the server started it
        root = process.pid
        start_cpu = tree_cpu_s(root)
        processes = 1 + len(descendants(root))
        burst(server, 2, 4)  # the first calls warm caches either layout fills once
        before = tree_cpu_s(root)
        wall, tokens = burst(server, calls, max_tokens)
        cpu = tree_cpu_s(root) - before
    return {"healthy_s": healthy_s, "start_cpu_s": start_cpu, "processes": processes, "burst_s": wall,
            "tokens_per_s": tokens / wall, "cpu_s_per_1k_tokens": 1000 * cpu / tokens}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the generated test model, 2 rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--calls", type=int, default=16, help="concurrent chat calls in a burst")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    with scratch_dir("vllm-layout") as work:
        model = generate_tiny_model(work / "tiny") if args.quick else resolve_model(DEFAULT_MODEL)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in LAYOUTS}
        for round_ in range(rounds):
            order = list(LAYOUTS) if round_ % 2 == 0 else list(reversed(LAYOUTS))
            for name in order:
                results[name].append(
                    measure(model, work, LAYOUTS[name], args.calls, args.max_tokens)
                )
                print(f"round {round_ + 1} {name}: " + json.dumps({k: round(v, 2) for k, v in results[name][-1].items()}),
                      flush=True)  # fmt: skip
    medians = {
        name: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        for name, rows in results.items()
    }
    new, old = (medians[name] for name in LAYOUTS)
    print(
        f"\n{model.name}, {rounds} rounds, bursts of {args.calls} calls x {args.max_tokens} tokens (medians)"
    )
    print(f"{'':24}{'one process':>14}{'vLLM default':>14}{'ratio':>8}")
    for key in new:
        print(f"{key:24}{new[key]:14.2f}{old[key]:14.2f}{new[key] / old[key]:8.2f}")
    print(
        json.dumps(
            {"model": model.name, "rounds": rounds}
            | {f"{k}_ratio": round(new[k] / old[k], 3) for k in new}
        )
    )


if __name__ == "__main__":
    main()

"""Multi-turn agents on a thinking-style template: tokens trained and ingest throughput, `exact_history` against
`as_deployed`, in one run on real vLLM.

Serves the small model with a template that drops earlier turns' reasoning (Qwen3's way) behind a store, an
assembler and an ingest. Agents reply `<think>…</think>answer` (vLLM's structured outputs) and are asked on.

- Tokens: one trajectory per length (5, 20, 50 turns) in each mode; the assembler's tokens trained (every
  sample's tokens), unique tokens, and splits. In `as_deployed` every follow-up rewrites the history, so each
  call is its own sample and the trained tokens grow with the square of the turns.
- Throughput: 8 agents at once, 5 turns each, whole and streamed answers; calls per second of each mode,
  alternating rounds, and the median of the per-round ratios.

    .venv/bin/python bench/multi_turn.py            # about five minutes on 2 cores
    .venv/bin/python bench/multi_turn.py --quick    # about two minutes
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from openai.types.chat import ChatCompletionMessageParam
from processes import PYTHON, Processes, free_port
from scratch import scratch_dir

import parity
from parity import engine
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.clients import AssemblerClient

MODEL = "thinking"
REPLY = {"regex": r"<think>[a-z ]{1,8}</think>[a-z ]{1,8}"}
MODES = ("as_deployed", "exact_history")


def start_mesh(processes: Processes, scratch: Path) -> tuple[str, str, str]:
    """vLLM with the thinking template, a store, an assembler and an ingest; their addresses."""
    model_dir = scratch / "model"
    subprocess.run([PYTHON, "-m", "parity.cli", "model", "generate", "--out", str(model_dir), "--chat-template",
                    "chatml-thinking"], check=True, capture_output=True)  # fmt: skip
    vllm_port, store_port, assembler_port, ingest_port, http_port = (free_port() for _ in range(5))
    processes.start("vllm", [PYTHON, "-m", "parity.cli", "vllm", "serve", "--model", str(model_dir), "--port",
                             str(vllm_port), "--served-model-name", MODEL, "--max-model-len", "4096"],
                    f"http://127.0.0.1:{vllm_port}/v1/models", timeout=300)  # fmt: skip
    store, assembler = f"127.0.0.1:{store_port}", f"127.0.0.1:{assembler_port}"
    processes.start("store", [PYTHON, "-m", "parity.cli", "store", "serve", "--port", str(store_port), "--url",
                              f"sqlite:///{scratch}/store.db", "--log-level", "warning"])  # fmt: skip
    processes.start("assembler", [PYTHON, "-m", "parity.cli", "assembler", "serve", "--port", str(assembler_port),
                                  "--store-address", store, "--log-level", "warning"])  # fmt: skip
    processes.start("ingest", [PYTHON, "-m", "parity.cli", "ingest", "serve", "--port", str(ingest_port),
                               "--http-port", str(http_port), "--upstreams", f"http://127.0.0.1:{vllm_port}",
                               "--store", store, "--spool-path", str(scratch / "spool.db"), "--log-level", "warning"],
                    f"http://127.0.0.1:{http_port}/health")  # fmt: skip
    deadline = time.monotonic() + 60
    while not httpx.get(f"http://127.0.0.1:{http_port}/v1/models").json()["data"]:
        if time.monotonic() > deadline:
            raise SystemExit("ingest never saw vLLM healthy")
        time.sleep(0.2)
    return f"http://127.0.0.1:{http_port}", assembler, store


def conversation(turns: int, stream: bool = False):
    async def agent(task: dict) -> float:
        client = parity.get_async_chat_client()
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": task["prompt"]}]
        for _ in range(turns):
            request: dict[str, Any] = {"model": MODEL, "messages": messages, "max_tokens": 40, "temperature": 1.0,
                       "extra_body": {"structured_outputs": REPLY}}  # fmt: skip
            if stream:
                content = ""
                async for chunk in await client.chat.completions.create(stream=True, **request):
                    content += (chunk.choices[0].delta.content or "") if chunk.choices else ""
            else:
                content = (
                    (await client.chat.completions.create(**request)).choices[0].message.content
                )
            messages += [
                {"role": "assistant", "content": content},
                {"role": "user", "content": "Go on."},
            ]
        return 1.0

    return agent


def token_rows(assembler: str, lengths: list[int]) -> list[dict]:
    rows = []
    client = AssemblerClient(assembler)
    for turns in lengths:
        for mode in MODES:
            (result,) = engine.run(conversation(turns), [{"id": f"t{turns}", "prompt": "What is two plus two?"}],
                                   rollouts_per_task=1, retries=0, progress=False, history_mode=mode,
                                   run_id=f"tokens-{mode}-{turns}", training_run="bench")  # fmt: skip
            if result.outcome != "succeeded":
                raise SystemExit(f"{mode} at {turns} turns: {result.error}")
            view = client.get_trajectory(assembler_pb.GetTrajectoryRequest(
                session_id=result.session_id, view=assembler_pb.TRAJECTORY_VIEW_BASIC)).trajectory  # fmt: skip
            rows.append({"turns": turns, "mode": mode, "trained": view.token_count, "unique": view.unique_token_count,
                         "ratio": view.token_count / view.unique_token_count, "splits": view.split_count})  # fmt: skip
    return rows


def throughput(agents: int, turns: int, rounds: int, stream: bool) -> dict:
    """Calls per second of each mode, rounds alternating; the ratio is the median of the rounds' ratios."""
    per_round: dict[str, list[float]] = {mode: [] for mode in MODES}
    tasks = [{"id": f"a{n}", "prompt": f"What is {n} plus two?"} for n in range(agents)]
    for round_index in range(rounds + 1):
        for mode in MODES:
            started = time.perf_counter()
            results = engine.run(conversation(turns, stream), tasks, rollouts_per_task=1, retries=0, progress=False,
                                 history_mode=mode, concurrency=agents, run_id=f"load-{mode}-{stream}-{round_index}",
                                 training_run="bench")  # fmt: skip
            elapsed = time.perf_counter() - started
            if any(r.outcome != "succeeded" for r in results):
                raise SystemExit(f"{mode}: {[r.error for r in results if r.error][:1]}")
            if round_index:  # the first round warms every path up
                per_round[mode].append(agents * turns / elapsed)
    ratios = [
        e / d for e, d in zip(per_round["exact_history"], per_round["as_deployed"], strict=True)
    ]
    return {"stream": stream, **{mode: statistics.median(v) for mode, v in per_round.items()},
            "ratio": statistics.median(ratios)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 and 20 turns, 2 throughput rounds")
    args = parser.parse_args(argv)
    lengths, rounds = ([5, 20], 2) if args.quick else ([5, 20, 50], 4)
    with scratch_dir("multi-turn") as scratch:
        processes = Processes(scratch)
        try:
            ingest_url, assembler, store = start_mesh(processes, scratch)
            parity.configure(
                ingest_url=ingest_url, assembler_address=assembler, store_address=store
            )
            tokens = token_rows(assembler, lengths)
            load = [throughput(8, 5, rounds, stream) for stream in (False, True)]
        finally:
            processes.stop()
    print(
        f"{'turns':>5} {'mode':<14} {'trained':>8} {'unique':>7} {'trained/unique':>15} {'splits':>6}"
    )
    for row in tokens:
        print(f"{row['turns']:>5} {row['mode']:<14} {row['trained']:>8} {row['unique']:>7} {row['ratio']:>15.2f} "
              f"{row['splits']:>6}")  # fmt: skip
    print(
        f"\n{'answers':<8} {'as_deployed calls/s':>20} {'exact_history calls/s':>22} {'ratio':>6}"
    )
    for row in load:
        print(f"{'streamed' if row['stream'] else 'whole':<8} {row['as_deployed']:>20.1f} {row['exact_history']:>22.1f} "
              f"{row['ratio']:>6.2f}")  # fmt: skip
    print(json.dumps({"tokens": tokens, "throughput": load}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

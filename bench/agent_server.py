"""Rollouts per minute of an agent that stays up (`agent_server`) against a process per rollout (`agent_command`),
in one run on the real stack.

The agent (`startup_agent.py`) is a Python program that imports what a real agent imports before its first call
(by default openai and transformers' AutoTokenizer, which brings torch), then makes one chat call per rollout
through the rollout's session. Both ways run on one local stack, the `parity up` that `parity train` brings up
(vLLM serving the generated test model, ingest, store, assembler, trainer), through the run's rollout runner, on
the same batch of tasks with every rollout of a batch at once, as `parity train` runs them. A batch is timed
from its submission to its last rollout's close. The server starts its processes in a first batch of its own,
paid once per run and reported apart; the rounds after it alternate which way goes first, and the ratio is the
median of the rounds' ratios. Its rollouts close as validation, so nothing is trained on.

    .venv/bin/python bench/agent_server.py                 # 3 rounds of 16 rollouts: about 5 minutes on 2 cores
    .venv/bin/python bench/agent_server.py --quick         # 2 rounds of 8
    .venv/bin/python bench/agent_server.py --imports numpy,openai
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scratch import scratch_dir

from parity.clients import AssemblerClient
from parity.config import current_config
from parity.engine.runner import Agent
from parity.services.inference.tiny_model import generate_tiny_model
from parity.training.agent_server import AgentServer
from parity.training.agents import CommandAgent
from parity.training.local_stack import served_model
from parity.training.rollout_runner import RolloutRunner, Sampling
from parity.training.run_stack import RunStack
from parity.training.settings import TrainSettings

AGENT = Path(__file__).with_name("startup_agent.py")
WAYS = ("agent_server", "agent_command")
PROMPTS = [
    "Tell me about your day.",
    "Describe the sea.",
    "What do you like?",
    "Say something kind.",
]


def import_seconds(imports: str, times: int = 2) -> float:
    """Wall seconds for the agent to start, import and exit in a fresh interpreter (the median of `times`)."""
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, str(AGENT), "--imports", imports, "--serve"], input=b"", check=True
        )
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def batch(runner: RolloutRunner, prefix: str, args: argparse.Namespace, model: str) -> float:
    """One batch of the run's rollouts, every rollout at once; its wall seconds. Any failed rollout ends the run."""
    tasks = [{"id": f"t{n}", "prompt": PROMPTS[n % len(PROMPTS)]} for n in range(args.tasks)]
    started = time.perf_counter()
    results = runner.submit(tasks, prefix=prefix, rollouts_per_task=args.rollouts_per_task, validation=True,
                            sampling=Sampling(model, args.max_tokens, 1.0)).result()  # fmt: skip
    seconds = time.perf_counter() - started
    failed = [
        f"{r.session_id}: {r.outcome}: {r.error}" for r in results if r.outcome != "succeeded"
    ]
    if failed:
        raise SystemExit(f"{len(failed)} rollouts of {prefix} failed:\n" + "\n".join(failed[:5]))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 8 rollouts")
    parser.add_argument("--imports", default="openai,transformers:AutoTokenizer",
                        help="what the agent imports before its first call: module or module:name, comma-separated")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--tasks", type=int, default=4, help="tasks a batch")
    parser.add_argument("--rollouts-per-task", type=int, default=None)
    parser.add_argument("--max-tokens", type=int, default=8)
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    args.rollouts_per_task = args.rollouts_per_task or (2 if args.quick else 4)
    rollouts = args.tasks * args.rollouts_per_task
    agent = [sys.executable, str(AGENT), "--imports", args.imports]
    server = AgentServer([*agent, "--serve"])
    agents: dict[str, Agent] = {"agent_server": server, "agent_command": CommandAgent(agent)}

    with scratch_dir("agent-server") as work:
        imported_s = import_seconds(args.imports)
        print(f"the agent starts and imports {args.imports} in {imported_s:.1f} s", flush=True)
        model_dir = generate_tiny_model(work / "tiny")
        stack = RunStack()
        runners: dict[str, RolloutRunner] = {}
        try:
            addresses = stack.open(
                TrainSettings(model=str(model_dir)), work / "run", model_dir, None
            )
            model = served_model(addresses.ingest_url, current_config().api_key)
            runners = {way: RolloutRunner(agents[way], AssemblerClient(addresses.assembler), run_id="bench",
                                          concurrency=rollouts, timeout_s=900, retries=0) for way in WAYS}  # fmt: skip
            first_s = batch(runners["agent_server"], "first", args, model)
            print(
                f"agent_server's first batch, starting its processes: {first_s:.1f} s", flush=True
            )
            seconds: dict[str, list[float]] = {way: [] for way in WAYS}
            for round_ in range(rounds):
                for way in WAYS if round_ % 2 == 0 else WAYS[::-1]:
                    seconds[way].append(batch(runners[way], f"{way}-{round_}", args, model))
                    print(f"round {round_ + 1} {way}: {seconds[way][-1]:.1f} s", flush=True)
        finally:
            for runner in runners.values():
                runner.close()
            stack.close()

    started = server.started
    per_minute = {way: [60 * rollouts / s for s in seconds[way]] for way in WAYS}
    ratios = [kept / each for kept, each in zip(*per_minute.values(), strict=True)]
    median = {way: statistics.median(per_minute[way]) for way in WAYS}
    print(f"\n{rollouts} rollouts a batch, all at once; {rounds} rounds (medians); the agent imports "
          f"{args.imports}: {imported_s:.1f} s in a fresh process")  # fmt: skip
    print(f"{'':28}{'agent_server':>14}{'agent_command':>15}{'ratio':>8}")
    print(f"{'rollouts per minute':28}{median['agent_server']:14.1f}{median['agent_command']:15.1f}"
          f"{statistics.median(ratios):8.2f}")  # fmt: skip
    print(f"{'seconds a batch':28}{statistics.median(seconds['agent_server']):14.1f}"
          f"{statistics.median(seconds['agent_command']):15.1f}")  # fmt: skip
    print(f"{'processes started':28}{started:14d}{rollouts * rounds:15d}")
    print(f"agent_server's first batch (starts its {started} processes, once a run): {first_s:.1f} s, "
          f"{60 * rollouts / first_s:.1f} rollouts per minute")  # fmt: skip
    print(json.dumps({"imports": args.imports, "import_s": round(imported_s, 2), "rollouts_per_batch": rollouts,
                      "rounds": rounds, "server_per_min": round(median["agent_server"], 1),
                      "command_per_min": round(median["agent_command"], 1),
                      "ratio": round(statistics.median(ratios), 2), "server_first_batch_s": round(first_s, 1)}))  # fmt: skip


if __name__ == "__main__":
    main()

"""The main job: train an agent end to end on this machine and show its reward rising.

It starts `parity up` exactly as a user would (store, assembler, trainer, ingest and
vLLM serving the small model, generated on first use), starts a training run on the
trainer, and then, step after step, runs an example agent through the agent engine:
every rollout's calls go through ingest into the token store, the engine closes each
rollout with its reward, the assembler turns each task's rollouts into a group and
feeds batches to the trainer, and the trainer trains (verl's GRPO and PPO-clip with
truncated importance sampling) and pushes verified weights back into vLLM before
the next step's rollouts run. The run's reward and loss per step end up in a PNG.

The task, "speak in words", is one a random small model can learn in a few dozen CPU
steps: the reward is the share of the reply's tokens that begin a new word (start
with a space). An untrained model scores about 0.3.

The last line printed is one JSON object: steps, reward_first and reward_last (mean
reward over the first and last steps), max_sync_logprob_diff, plot, and timings.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

import parity
import parity.engine
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import AssemblerClient, TrainerClient

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("store", "ingest", "assembler", "trainer")
PROMPTS = ["Tell me about your day.", "Describe the sea.", "What do you like?", "Say something kind."]
TERMINAL = (run_pb2.RUN_STATE_COMPLETED, run_pb2.RUN_STATE_FAILED, run_pb2.RUN_STATE_STOPPED)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(stack: subprocess.Popen[str], timeout_s: float) -> None:
    """Echo `parity up`'s output until it reports every address; fail if it exits first."""
    deadline = time.monotonic() + timeout_s
    assert stack.stdout is not None
    while time.monotonic() < deadline:
        line = stack.stdout.readline()
        if not line:
            raise SystemExit(f"parity up exited with {stack.wait()} before it was up")
        print(line, end="", flush=True)
        if line.startswith("Press Ctrl-C"):
            return
    raise SystemExit(f"parity up was not up after {timeout_s}s")


def word_start_share(token_texts: list[str]) -> float:
    """The reward: the share of generated tokens that begin a new word."""
    return sum(text.startswith(" ") for text in token_texts) / max(1, len(token_texts))


async def speak_in_words(task: dict[str, Any]) -> float:
    """The example agent: one chat call through ingest, scored on its own reply."""
    client = parity.get_async_chat_client()
    completion = await client.chat.completions.create(
        model=task["model"], messages=[{"role": "user", "content": task["prompt"]}],
        max_tokens=task["max_tokens"], temperature=1.0, logprobs=True,
    )  # fmt: skip
    return word_start_share([entry.token for entry in completion.choices[0].logprobs.content])


def wait_for_step(trainer: TrainerClient, assembler: AssemblerClient, step: int, top_up: Any) -> trainer_pb.GetStatusResponse:
    """Wait until the trainer has finished `step`; add a task group whenever the assembler holds none
    (a group whose rewards are all equal is dropped, so a batch can come up short)."""
    idle_since = time.monotonic()
    while True:
        status = trainer.get_status(trainer_pb.GetStatusRequest())
        if status.run.step >= step or status.run.state in TERMINAL:
            return status
        waiting = status.run.state == run_pb2.RUN_STATE_WAITING_FOR_DATA
        pending = assembler.get_stats(assembler_pb.GetStatsRequest()).pending_group_count
        if waiting and pending == 0 and time.monotonic() - idle_since > 3.0:
            top_up()
            idle_since = time.monotonic()
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=REPO_ROOT / ".parity" / "demo", help="emptied first")
    parser.add_argument("--model", type=Path, default=None, help="model to train (default: the small model)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--groups-per-batch", type=int, default=4)
    parser.add_argument("--rollouts-per-task", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--backend", choices=("cpu", "fsdp", "auto"), default="auto")
    parser.add_argument(
        "--ray-workers-per-node", type=int, default=0, help="fsdp: training ranks as Ray actors (one per GPU); 0: in the trainer"
    )
    args = parser.parse_args()
    started = time.monotonic()
    shutil.rmtree(args.data_dir, ignore_errors=True)
    ports = {name: free_port() for name in (*SERVICES, "vllm", "http")}
    command = [sys.executable, "-m", "parity.cli", "up", "--data-dir", str(args.data_dir)]
    command += ["--model", str(args.model)] if args.model else []
    command += [arg for name, port in ports.items() for arg in (f"--{name}-port", str(port))]
    stack = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    result: dict[str, Any] = {}
    try:
        wait_until_up(stack, timeout_s=900)
        stack_up_s = time.monotonic() - started
        assembler_address = f"127.0.0.1:{ports['assembler']}"
        parity.configure(ingest_url=f"http://127.0.0.1:{ports['http']}", assembler_address=assembler_address)
        trainer = TrainerClient(f"127.0.0.1:{ports['trainer']}")
        assembler = AssemblerClient(assembler_address)
        model_path = (args.model or args.data_dir / "model").resolve()
        backend = {"cpu": run_pb2.TRAINING_BACKEND_CPU, "fsdp": run_pb2.TRAINING_BACKEND_FSDP}.get(args.backend, 0)
        run = trainer.start_run(trainer_pb.StartRunRequest(config=run_pb2.RunConfig(
            model_path=str(model_path), total_steps=args.steps, groups_per_batch=args.groups_per_batch,
            learning_rate=args.learning_rate, backend=backend, rollout_mode=run_pb2.ROLLOUT_MODE_SYNC,
            advantage_estimator=run_pb2.ADVANTAGE_ESTIMATOR_GRPO, checkpoint_interval=10,
            overrides={"ray_workers_per_node": str(args.ray_workers_per_node)} if args.ray_workers_per_node else {},
        ))).run  # fmt: skip
        print(f"training run {run.run_id}: {args.steps} steps of {args.groups_per_batch} tasks x "
              f"{args.rollouts_per_task} rollouts", flush=True)  # fmt: skip
        served_model = httpx.get(f"http://127.0.0.1:{ports['http']}/v1/models", timeout=30).json()["data"][0]["id"]
        task_counter = iter(range(10**9))

        def roll_out(count: int) -> list[float]:
            tasks = []
            for _ in range(count):
                n = next(task_counter)
                tasks.append({"id": f"task-{n:05d}", "prompt": PROMPTS[n % len(PROMPTS)], "model": served_model,
                              "max_tokens": args.max_tokens})  # fmt: skip
            results = parity.engine.run(
                speak_in_words, tasks, rollouts_per_task=args.rollouts_per_task,
                concurrency=args.rollouts_per_task * args.groups_per_batch, timeout_s=120, retries=1, progress=False,
            )  # fmt: skip
            return [r.reward for r in results if r.reward is not None]

        status = trainer.get_status(trainer_pb.GetStatusRequest())
        for step in range(1, args.steps + 1):
            rewards = roll_out(args.groups_per_batch)
            status = wait_for_step(trainer, assembler, step, lambda: roll_out(1))
            if status.run.state in TERMINAL and status.run.step < args.steps:
                break
            sync = status.last_sync
            print(f"step {status.run.step:3d}/{args.steps}  agent reward {sum(rewards) / len(rewards):.3f}  "
                  f"sync {sync.durations.total.ToTimedelta().total_seconds():.2f}s  "
                  f"probe diff {sync.max_logprob_diff:.1e}", flush=True)  # fmt: skip
        while status.run.state not in TERMINAL:
            time.sleep(0.5)
            status = trainer.get_status(trainer_pb.GetStatusRequest())
        records = []
        for response in trainer.stream_metrics(trainer_pb.StreamMetricsRequest()):
            records.append(dict(response.metrics.values))
            if len(records) >= status.run.step:
                break
        window = max(1, min(5, len(records) // 3))
        reward = [r["reward_mean"] for r in records]

        def mean(values: list[float]) -> float:
            return round(sum(values) / max(1, len(values)), 4)

        result = {
            "steps": status.run.step,
            "state": run_pb2.RunState.Name(status.run.state),
            "error": status.run.error_message,
            "reward_first": mean(reward[:window]),
            "reward_last": mean(reward[-window:]),
            "reward_window_steps": window,
            "max_sync_logprob_diff": max((r["sync_max_logprob_diff"] for r in records), default=None),
            "sync_seconds_mean": mean([r["sync_seconds"] for r in records]),
            "sync_push_seconds_mean": mean([r["sync_push_seconds"] for r in records]),
            "sync_verify_seconds_mean": mean([r["sync_verify_seconds"] for r in records]),
            "train_seconds_mean": mean([r["train_seconds"] for r in records]),
            "tokens_per_s_mean": mean([r["tokens_per_s"] for r in records]),
            "plot": status.run.plot_path,
            "run_id": status.run.run_id,
            "stack_up_seconds": round(stack_up_s, 1),
        }
    finally:
        stack.send_signal(signal.SIGINT)
        result["stack_exit_code"] = stack.wait(120)
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    ok = result.get("state") == "RUN_STATE_COMPLETED" and result["reward_last"] > result["reward_first"]
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The main job, as far as the built services reach: bring the stack up and run one episode.

It starts `parity up` exactly as a user would, checks that every service answers
its health check, runs one chat completion on the served model asking for the
exact token ids and logprobs Parity captures, and stops the stack with Ctrl-C's
signal. The last line printed is one JSON object with the results.

Until the ingest issue lands the episode goes straight to vLLM and is not yet
recorded in the store; the trainer issue turns this into a real training run.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import openai
from grpc_health.v1 import health_pb2, health_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("store", "ingest", "assembler", "trainer")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(stack: subprocess.Popen[str], timeout_s: float) -> list[str]:
    """Echo `parity up`'s output until it reports every address; fail if it exits first."""
    deadline = time.monotonic() + timeout_s
    lines: list[str] = []
    assert stack.stdout is not None
    while time.monotonic() < deadline:
        line = stack.stdout.readline()
        if not line:
            raise SystemExit(f"parity up exited with {stack.wait()} before it was up")
        print(line, end="", flush=True)
        lines.append(line)
        if line.startswith("Press Ctrl-C"):
            return lines
    raise SystemExit(f"parity up was not up after {timeout_s}s")


def main() -> int:
    ports = {name: free_port() for name in (*SERVICES, "vllm")}
    command = [sys.executable, "-m", "parity.cli", "up", "--data-dir", str(REPO_ROOT / ".parity")]
    command += [arg for name, port in ports.items() for arg in (f"--{name}-port", str(port))]
    stack = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        wait_until_up(stack, timeout_s=900)
        healthy = []
        for name in SERVICES:
            with grpc.insecure_channel(f"127.0.0.1:{ports[name]}") as channel:
                status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
                if status.status == health_pb2.HealthCheckResponse.SERVING:
                    healthy.append(name)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{ports['vllm']}/v1", api_key="unused")
        model = client.models.list().data[0].id
        completion = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "What is 2 + 3?"}],
            max_tokens=16,
            logprobs=True,
            extra_body={"return_token_ids": True},
        )
        choice = completion.choices[0]
        token_ids = choice.model_extra["token_ids"] if choice.model_extra else []
        logprobs = [entry.logprob for entry in choice.logprobs.content] if choice.logprobs else []
        result = {
            "services_healthy": healthy,
            "model": model,
            "prompt_token_ids": (completion.model_extra or {}).get("prompt_token_ids", []),
            "completion_token_ids": token_ids,
            "completion_logprobs": [round(value, 4) for value in logprobs],
            "completion_text": choice.message.content,
        }
    finally:
        stack.send_signal(signal.SIGINT)
        exit_code = stack.wait(60)
    result["stack_exit_code"] = exit_code
    ok = len(result["services_healthy"]) == len(SERVICES) and result["completion_token_ids"] and exit_code == 0
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

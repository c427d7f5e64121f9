"""The main job, as far as the built services reach: bring the stack up and run one captured episode.

It starts `parity up` exactly as a user would, checks that every service answers
its health check, runs a two-turn chat through ingest with the official openai
client (only base_url changes), reads the captured calls back from the token store
and checks they hold exactly the token ids vLLM generated, then stops the stack
with Ctrl-C's signal. The last line printed is one JSON object with the results.

The trainer issue turns this into a real training run.
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

from parity import tokens
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.store.v1 import store_service_pb2_grpc as store_grpc

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("store", "ingest", "assembler", "trainer")
SESSION = "demo-episode"


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
    ports = {name: free_port() for name in (*SERVICES, "vllm", "http")}
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
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{ports['http']}/sessions/{SESSION}/v1", api_key="unused")
        model = client.models.list().data[0].id
        messages = [{"role": "user", "content": "What is 2 + 3?"}]
        returned = []
        for _ in range(2):
            completion = client.chat.completions.create(
                model=model, messages=messages, max_tokens=16, extra_body={"return_token_ids": True}
            )
            returned.append(completion.choices[0].model_extra["token_ids"])
            messages += [{"role": "assistant", "content": completion.choices[0].message.content},
                         {"role": "user", "content": "And 4 + 4?"}]  # fmt: skip
        with grpc.insecure_channel(f"127.0.0.1:{ports['store']}") as channel:
            captured = store_grpc.TokenStoreServiceStub(channel).ListCalls(
                store_pb.ListCallsRequest(session_id=SESSION, view=store_pb.CALL_VIEW_FULL)
            ).calls
        captured_ids = [tokens.unpack_token_ids(call.choices[0].token_ids).tolist() for call in captured]
        result = {
            "services_healthy": healthy,
            "model": model,
            "session": SESSION,
            "captured_calls": len(captured),
            "captured_equals_generated": captured_ids == returned,
            "prompt_token_ids": tokens.unpack_token_ids(captured[-1].prompt_token_ids).tolist() if captured else [],
            "completion_token_ids": captured_ids[-1] if captured_ids else [],
            "completion_logprobs": [
                round(v, 4) for v in tokens.unpack_floats(captured[-1].choices[0].logprobs).tolist()
            ] if captured else [],
        }  # fmt: skip
    finally:
        stack.send_signal(signal.SIGINT)
        exit_code = stack.wait(60)
    result["stack_exit_code"] = exit_code
    ok = len(result["services_healthy"]) == len(SERVICES) and result["captured_equals_generated"] and exit_code == 0
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

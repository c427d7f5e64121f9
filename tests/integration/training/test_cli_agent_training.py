"""Claude Code and Codex CLI, unchanged, trained from the front door: `parity train --agent-command 'claude -p ...'` on the
local stack it brings up, with a reward function scoring its output. Claude Code asks for its vendor's model
names (claude-*); the stack's default model aliases serve them with the policy, and every call it made is
captured token-exactly and trained on.

Claude Code runs with its tools off and a one-line system prompt. With its own (about 27,000 tokens of the
small model's tokenizer, which test_cli_agents.py captures whole) a training step on 2 shared CPU cores took
over 10 minutes: the run is the same, only shorter. The run still says --max-model-len, which a full prompt
needs.

Codex CLI runs the same way, `codex exec` with a short system prompt and its custom (grammar) and function tools,
asking for gpt-5.5 through a model provider on the rollout's session URL (`OPENAI_BASE_URL`).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import grpc
import pytest
from transformers import AutoTokenizer

from parity.api.store.v1 import store_service_pb2 as pb
from parity.api.store.v1 import store_service_pb2_grpc as pb_grpc
from parity.services.inference.tiny_model import TinyModelSpec, generate_tiny_model
from parity.services.inference.vllm_launcher import VllmLaunchConfig, VllmServer
from tests.conftest import REPO_ROOT, free_port
from tests.integration.claude_code import (
    LONG_CONTEXT,
    answer_text,
    check_token_exact,
    claude_code,
    offline_environment,
)
from tests.integration.codex_cli import check_token_exact as check_codex_call
from tests.integration.codex_cli import codex_cli, codex_config
from tests.integration.vllm_fixtures import VLLM_STARTUP_TIMEOUT_S, inference_python

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1800)]

SERVED = "tiny-long"


def stored_calls(start_service, store_db: Path) -> list:
    """Every call of the run, read back through a store serving the run's database."""
    store = start_service("store", "--url", f"sqlite:///{store_db}")
    calls = []
    with grpc.insecure_channel(store.address) as channel:
        stub = pb_grpc.TokenStoreServiceStub(channel)
        sessions = stub.ListSessions(pb.ListSessionsRequest(page_size=1000)).sessions
        for session in sessions:
            listed = stub.ListCalls(pb.ListCallsRequest(session_id=session.session_id, page_size=1000,
                                                        view=pb.CALL_VIEW_FULL))  # fmt: skip
            calls += listed.calls
    return calls


def test_claude_code_trains_from_parity_train_with_every_call_token_exact(
    tmp_path, start_service
) -> None:
    model = generate_tiny_model(
        tmp_path / SERVED, TinyModelSpec(max_position_embeddings=LONG_CONTEXT)
    )
    home, events = tmp_path / "home", tmp_path / "events"
    home.mkdir()
    events.mkdir()
    (tmp_path / "tasks.jsonl").write_text(
        json.dumps({"id": "hello", "prompt": "Say hello."}) + "\n"
    )
    offline = " ".join(
        f"{name}={shlex.quote(value)}" for name, value in offline_environment(home).items()
    )
    # The task arrives on stdin, which `claude -p` reads as context for its prompt. The small model's replies
    # run to CLAUDE_CODE_MAX_OUTPUT_TOKENS; Claude Code retries such a reply three times, then exits 1 with
    # "API Error: ... exceeded the 32 output token maximum", which fails the rollout unless the script carries on.
    agent = tmp_path / "claude-agent.sh"
    agent.write_text(f"#!/bin/sh\nenv {offline} {shlex.quote(claude_code())} -p 'Say hello.' --tools '' "
                     "--system-prompt 'You are a friendly assistant.' --output-format stream-json --verbose\n"
                     "exit 0\n")  # fmt: skip
    agent.chmod(0o755)
    runs = tmp_path / "runs"
    finished = subprocess.run(
        [sys.executable, "-m", "parity.cli", "train", "--agent-command", str(agent),
         "--reward", "tests.integration.training.claude_code_reward:reward",
         "--tasks", str(tmp_path / "tasks.jsonl"), "--model", str(model), "--max-model-len", str(LONG_CONTEXT),
         "--steps", "2", "--groups-per-batch", "1", "--rollouts-per-task", "2", "--retries", "0",
         "--learning-rate", "1e-3", "--checkpoint-interval", "0", "--no-export",
         "--output-dir", str(runs), "--run-id", "claude"],
        env={**os.environ, "CLAUDE_CODE_EVENTS_DIR": str(events)},
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-4000:]
    result = json.loads(finished.stdout.splitlines()[-1])
    assert (result["state"], result["steps"]) == ("completed", 2), result
    assert result["max_sync_logprob_diff"] is not None and result["max_sync_logprob_diff"] < 1e-3

    # Every reply Claude Code received is one call the store holds, asked for by a vendor name.
    answers = [
        event["message"] for path in sorted(events.iterdir()) for event in json.loads(path.read_text())
        if event["type"] == "assistant" and event["message"]["model"] != "<synthetic>"
    ]  # fmt: skip
    calls = stored_calls(start_service, runs / "claude" / "stack" / "store.db")
    assert len(answers) >= 4 and len(calls) == len(answers)
    assert Counter(call.choices[0].text for call in calls) == Counter(map(answer_text, answers))
    by_text = {answer_text(answer): answer for answer in answers}

    # ... and token-exact: its prompt is vLLM's own rendering of the request, its reply the sampled ids.
    tokenizer = AutoTokenizer.from_pretrained(model)
    config = VllmLaunchConfig(
        model_path=model, port=free_port(), python=inference_python(), served_model_name=SERVED,
        max_model_len=LONG_CONTEXT, log_path=tmp_path / "vllm.log", startup_timeout_s=VLLM_STARTUP_TIMEOUT_S,
    )  # fmt: skip
    with VllmServer(config) as renderer:
        for call in calls:
            check_token_exact(
                call, by_text[call.choices[0].text], renderer.base_url, SERVED, tokenizer
            )


def test_codex_cli_trains_from_parity_train_with_every_call_token_exact(
    tmp_path, start_service
) -> None:
    model = generate_tiny_model(
        tmp_path / SERVED, TinyModelSpec(max_position_embeddings=LONG_CONTEXT)
    )
    home, events = tmp_path / "home", tmp_path / "events"
    home.mkdir()
    events.mkdir()
    (tmp_path / "tasks.jsonl").write_text(
        json.dumps({"id": "hello", "prompt": "Write hi to hello.txt."}) + "\n"
    )
    offline = " ".join(
        f"{name}={shlex.quote(value)}"
        for name, value in codex_config(home, "gpt-5.5", None, short=True).items()
    )
    # The provider's base URL is the rollout's session URL; Codex works in a folder of its own.
    agent = tmp_path / "codex-agent.sh"
    agent.write_text(f"#!/bin/sh\ncd \"$(mktemp -d)\" || exit 1\n"
                     f"env {offline} {shlex.quote(codex_cli())} exec --skip-git-repo-check --json "
                     "-c \"model_providers.parity.base_url=\\\"$OPENAI_BASE_URL\\\"\" 'Write hi to hello.txt.' </dev/null\n")  # fmt: skip
    agent.chmod(0o755)
    runs = tmp_path / "runs"
    finished = subprocess.run(
        [sys.executable, "-m", "parity.cli", "train", "--agent-command", str(agent),
         "--reward", "tests.integration.training.codex_reward:reward",
         "--tasks", str(tmp_path / "tasks.jsonl"), "--model", str(model), "--max-model-len", str(LONG_CONTEXT),
         "--steps", "2", "--groups-per-batch", "1", "--rollouts-per-task", "2", "--retries", "0",
         "--learning-rate", "1e-3", "--checkpoint-interval", "0", "--no-export",
         "--output-dir", str(runs), "--run-id", "codex"],
        env={**os.environ, "CODEX_EVENTS_DIR": str(events)},
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-4000:]
    result = json.loads(finished.stdout.splitlines()[-1])
    assert (result["state"], result["steps"]) == ("completed", 2), result
    assert result["max_sync_logprob_diff"] is not None and result["max_sync_logprob_diff"] < 1e-3

    # Every reply Codex received is a call the store holds, asked for by its own model name ...
    said = [
        event["item"]["text"] for path in sorted(events.iterdir()) for event in json.loads(path.read_text())
        if event["type"] == "item.completed" and event["item"]["type"] == "agent_message"
    ]  # fmt: skip
    calls = stored_calls(start_service, runs / "codex" / "stack" / "store.db")
    assert len(list(events.iterdir())) >= 4 and len(calls) >= len(said) >= 1
    assert all(json.loads(call.request_json)["model"] == "gpt-5.5" for call in calls)
    assert Counter(said) <= Counter(call.choices[0].text for call in calls)

    # ... and token-exact: its prompt is vLLM's own rendering of the request, its reply the sampled ids.
    tokenizer = AutoTokenizer.from_pretrained(model)
    config = VllmLaunchConfig(
        model_path=model, port=free_port(), python=inference_python(), served_model_name=SERVED,
        max_model_len=LONG_CONTEXT, log_path=tmp_path / "vllm.log", startup_timeout_s=VLLM_STARTUP_TIMEOUT_S,
    )  # fmt: skip
    with VllmServer(config) as renderer:
        for call in calls:
            check_codex_call(call, renderer.base_url, SERVED, tokenizer)

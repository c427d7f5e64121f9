"""A black-box CLI agent, unchanged, run as a subprocess with nothing but environment variables pointing it at
ingest: Claude Code (`claude -p`) over /v1/messages, captured token-exactly.

Claude Code sends its whole system prompt and tool catalogue with every call (about 27,000 tokens of the small
model's tokenizer), so it gets a vLLM of its own with a long context. Its words are nonsense; the capture is not.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from transformers import AutoTokenizer

import parity
from parity.services.inference.tiny_model import TinyModelSpec, generate_tiny_model
from parity.services.inference.vllm_launcher import VllmServer
from parity.training.agents import CommandAgent
from tests.integration.claude_code import (
    LONG_CONTEXT,
    check_token_exact,
    claude_code,
    offline_environment,
)
from tests.integration.stack_fixtures import IngestStack, start_ingest
from tests.integration.vllm_fixtures import serving_model

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def long_context_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    model = generate_tiny_model(
        tmp_path_factory.mktemp("long-model"), TinyModelSpec(max_position_embeddings=LONG_CONTEXT)
    )
    with serving_model(
        model, tmp_path_factory, served_model_name="tiny", max_model_len=LONG_CONTEXT
    ) as server:
        yield server


@pytest.fixture(scope="module")
def cli_stack(module_services, long_context_vllm, tmp_path_factory) -> Iterator[IngestStack]:
    data = tmp_path_factory.mktemp("cli-agents")
    store = module_services.start("store", "--url", f"sqlite:///{data}/store.db")
    ingest, http_port = start_ingest(
        module_services,
        store.address,
        long_context_vllm.base_url,
        data / "spool.db",
        "--model-alias",
        "claude-*=@policy",
    )
    previous = parity.current_config()
    parity.configure(ingest_url=f"http://127.0.0.1:{http_port}")
    yield IngestStack(store, ingest, http_port, data / "spool.db")
    parity.configure(ingest_url=previous.ingest_url)


def run_claude_code(session_id: str, home: Path) -> list[dict]:
    """`claude -p` in a session, in the environment `parity train --agent-command` gives a command; its events."""
    with parity.session(session_id):
        environment = CommandAgent([claude_code()]).environment({"id": session_id})
    environment |= offline_environment(home)
    finished = subprocess.run(
        [claude_code(), "-p", "Say hello.", "--output-format", "stream-json", "--verbose"],
        env=environment, cwd=home, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    events = [json.loads(line) for line in finished.stdout.splitlines() if line.startswith("{")]
    assert events and events[-1]["type"] == "result", (
        finished.stderr[-2000:] or finished.stdout[-2000:]
    )
    return events


def test_claude_code_is_captured_token_exactly(cli_stack, long_context_vllm, tmp_path) -> None:
    events = run_claude_code("claude-code", tmp_path)
    answers = [
        event["message"]
        for event in events
        if event["type"] == "assistant" and event["message"]["model"] != "<synthetic>"
    ]
    calls = cli_stack.wait_for_calls("claude-code", len(answers))
    assert answers and len(calls) == len(answers)

    tokenizer = AutoTokenizer.from_pretrained(long_context_vllm.config.model_path)
    for call, answer in zip(calls, answers, strict=True):
        # Claude Code's real request: its system prompt, tools, and turns so far.
        request = json.loads(call.request_json)
        assert len(request["tools"]) > 5 and len(call.prompt_token_ids) // 4 > 10_000
        check_token_exact(call, answer, long_context_vllm.base_url, "tiny", tokenizer)

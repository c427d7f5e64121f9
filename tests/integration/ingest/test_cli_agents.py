"""A black-box CLI agent, unchanged, run as a subprocess with nothing but environment variables pointing it at
ingest: Claude Code (`claude -p`) over /v1/messages, captured token-exactly.

Claude Code sends its whole system prompt and tool catalogue with every call (about 27,000 tokens of the small
model's tokenizer), so it gets a vLLM of its own with a long context. Its words are nonsense; the capture is not.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from transformers import AutoTokenizer

import parity
from parity.api.common.v1 import llm_call_pb2
from parity.services.inference.tiny_model import TinyModelSpec, generate_tiny_model
from parity.services.inference.vllm_launcher import VllmLaunchConfig, VllmServer, find_vllm_python
from parity.training.agents import CommandAgent
from tests.conftest import free_port
from tests.integration.stack_fixtures import IngestStack, start_ingest
from tests.integration.vllm_fixtures import VLLM_STARTUP_TIMEOUT_S

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[3]
CLAUDE = REPO / ".tools" / "agents" / "node_modules" / ".bin" / "claude"
LONG_CONTEXT = 65536
REPLACEMENT_CHARACTER = "\ufffd"
TOOL_CALL_START = "<tool_call>"


def claude_code() -> str:
    found = str(CLAUDE) if CLAUDE.exists() else shutil.which("claude")
    if found is None:
        pytest.fail(f"Claude Code is missing: no {CLAUDE}. Install it with `make env` (npm).", pytrace=False)
    return found


@pytest.fixture(scope="module")
def long_context_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    model = generate_tiny_model(tmp_path_factory.mktemp("long-model"), TinyModelSpec(max_position_embeddings=LONG_CONTEXT))
    config = VllmLaunchConfig(
        model_path=model, port=free_port(), python=find_vllm_python(), served_model_name="tiny",
        max_model_len=LONG_CONTEXT, log_path=tmp_path_factory.mktemp("long-vllm") / "vllm.log",
        startup_timeout_s=VLLM_STARTUP_TIMEOUT_S,
    )  # fmt: skip
    with VllmServer(config) as server:
        yield server


@pytest.fixture(scope="module")
def cli_stack(module_services, long_context_vllm, tmp_path_factory) -> Iterator[IngestStack]:
    data = tmp_path_factory.mktemp("cli-agents")
    store = module_services.start("store", "--url", f"sqlite:///{data}/store.db")
    ingest, http_port = start_ingest(
        module_services, store.address, long_context_vllm.base_url, data / "spool.db", "--model-alias", "claude-*=@policy"
    )
    previous = parity.current_config()
    parity.configure(ingest_url=f"http://127.0.0.1:{http_port}")
    yield IngestStack(store, ingest, http_port, data / "spool.db")
    parity.configure(ingest_url=previous.ingest_url)


def run_claude_code(session_id: str, home: Path) -> list[dict]:
    """`claude -p` in a session, in the environment `parity train --agent-command` gives a command; its events."""
    with parity.session(session_id):
        environment = CommandAgent([claude_code()]).environment({"id": session_id})
    environment |= {
        "HOME": str(home),  # none of this machine's Claude settings or logins
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry or update checks: the host is offline
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "32",  # the small model seldom samples its end token
    }
    finished = subprocess.run(
        [claude_code(), "-p", "Say hello.", "--output-format", "stream-json", "--verbose"],
        env=environment, cwd=home, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    events = [json.loads(line) for line in finished.stdout.splitlines() if line.startswith("{")]
    assert events and events[-1]["type"] == "result", finished.stderr[-2000:] or finished.stdout[-2000:]
    return events


def test_claude_code_is_captured_token_exactly(cli_stack, long_context_vllm, tmp_path) -> None:
    events = run_claude_code("claude-code", tmp_path)
    answers = [event["message"] for event in events if event["type"] == "assistant" and event["message"]["model"] != "<synthetic>"]
    calls = cli_stack.wait_for_calls("claude-code", len(answers))
    assert answers and len(calls) == len(answers)

    tokenizer = AutoTokenizer.from_pretrained(long_context_vllm.config.model_path)
    for call, answer in zip(calls, answers, strict=True):
        request = json.loads(call.request_json)
        assert call.endpoint == llm_call_pb2.CALL_ENDPOINT_ANTHROPIC_MESSAGES and call.streamed
        # The agent's own model name is kept; the policy served it.
        assert call.model == request["model"] == answer["model"] and call.model.startswith("claude-")
        assert call.served_model == "tiny"
        # Claude Code's real request: its system prompt, tools, and turns so far.
        assert len(request["tools"]) > 5 and len(call.prompt_token_ids) // 4 > 10_000

        # The prompt is exactly what vLLM's own /v1/messages renders for that request.
        render = httpx.post(f"{long_context_vllm.base_url}/v1/messages/render", json=request | {"model": "tiny"}, timeout=120)
        assert render.status_code == 200, render.text
        assert np.frombuffer(call.prompt_token_ids, dtype="<i4").tolist() == render.json()["token_ids"]

        # What the agent was told is what the sampled ids decode to. vLLM's streaming detokenizer holds back
        # a character whose bytes are not all sampled yet, so a reply cut at max_tokens may end one short.
        choice = call.choices[0]
        sampled = np.frombuffer(choice.token_ids, dtype="<i4").tolist()
        assert len(sampled) == len(choice.logprobs) // 4 > 0
        decoded = tokenizer.decode(sampled, skip_special_tokens=True)
        received = "".join(block["text"] for block in answer["content"] if block["type"] == "text")
        assert choice.text == received
        if TOOL_CALL_START in decoded:
            # From a sampled tool-call token on, the text is the tool parser's reading of it.
            decoded, received = decoded.split(TOOL_CALL_START)[0], received[: len(decoded.split(TOOL_CALL_START)[0])]
        assert decoded == received or (choice.finish_reason == "length" and decoded == received + REPLACEMENT_CHARACTER)
        tool_uses = [block["name"] for block in answer["content"] if block["type"] == "tool_use"]
        assert [tool["function"]["name"] for tool in json.loads(choice.tool_calls_json or b"[]")] == tool_uses

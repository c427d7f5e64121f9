"""A black-box CLI agent, unchanged, run as a subprocess with nothing but its configuration pointing it at
ingest: Claude Code (`claude -p`) over /v1/messages and Codex CLI (`codex exec`) over /v1/responses, captured
token-exactly.

Claude Code sends its whole system prompt and tool catalogue with every call (about 27,000 tokens of the small
model's tokenizer), so it gets a vLLM of its own with a long context. Its words are nonsense; the capture is not.
Codex sends what vLLM's own Responses API does not serve (a custom tool with a grammar, namespaced tools in an
`additional_tools` item), which ingest translates; its prompt is still vLLM's own rendering of the same request.
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
from tests.integration.codex_cli import check_token_exact as check_codex_call
from tests.integration.codex_cli import codex_cli, codex_config, run_codex
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
        "--model-alias",
        "gpt-*=@policy",
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


@pytest.mark.parametrize(
    ("model", "translated"),
    [
        # Codex's catalogue for gpt-5.5: function tools, a custom tool with a lark grammar (apply_patch), tool_search.
        ("gpt-5.5", lambda request: any(tool["type"] == "custom" and tool.get("format", {}).get("type") == "grammar"
                                        for tool in request["tools"])),
        # ... for gpt-6.2-sol: no `tools`, an `additional_tools` item of namespaces, one with a custom tool (exec).
        ("gpt-6.2-sol", lambda request: request["input"][0]["type"] == "additional_tools"
                                        and "tools" not in request),
    ],
)  # fmt: skip
def test_codex_cli_is_captured_token_exactly(
    cli_stack, long_context_vllm, tmp_path, model, translated
) -> None:
    session = f"codex-{model.replace('.', '-')}"
    with parity.session(session):
        environment = CommandAgent([codex_cli()]).environment({"id": session})
    environment |= codex_config(tmp_path, model, environment["OPENAI_BASE_URL"])
    (workdir := tmp_path / "work").mkdir()
    events = run_codex("Write hi to hello.txt.", environment, workdir)
    calls = cli_stack.calls_after_flush(session)
    assert calls, events
    tokenizer = AutoTokenizer.from_pretrained(long_context_vllm.config.model_path)
    requests = [json.loads(call.request_json) for call in calls]
    assert translated(requests[0]), "Codex no longer sends what this test translates"
    for call in calls:
        check_codex_call(call, long_context_vllm.base_url, "tiny", tokenizer)
    # Every reply Codex was told is one a call sampled; a tool the policy called was run and answered next call.
    said = [event["item"]["text"] for event in events
            if event["type"] == "item.completed" and event["item"]["type"] == "agent_message"]  # fmt: skip
    assert set(said) <= {call.choices[0].text for call in calls}
    for call, following in zip(calls, requests[1:], strict=False):
        called = {tool["id"] for tool in json.loads(call.choices[0].tool_calls_json or b"[]")}
        answered = {
            item["call_id"]
            for item in following["input"]
            if item.get("type", "").endswith("call_output")
        }
        assert called <= answered


def test_codex_cli_falls_back_from_websockets_at_once(cli_stack, tmp_path) -> None:
    """Codex's own OpenAI provider tries a WebSocket first: ingest's 426 has it use HTTP after that one handshake;
    a refusal it retries (403, 404) cost each run about 6.6 s of backoff, reported as "Reconnecting... n/5"."""
    session = "codex-websocket"
    with parity.session(session):
        environment = CommandAgent([codex_cli()]).environment({"id": session})
    environment |= codex_config(tmp_path, "gpt-5.5", None)
    built_in = [codex_cli(), "exec", "--skip-git-repo-check", "--json", "-c", 'model_provider="openai"',
                "-c", f'openai_base_url="{environment["OPENAI_BASE_URL"]}"', "Say hi."]  # fmt: skip
    finished = subprocess.run(built_in, env=environment, cwd=tmp_path, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=400)  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "Reconnecting" not in finished.stderr and "Responses WebSocket" in finished.stderr
    assert cli_stack.calls_after_flush(session)

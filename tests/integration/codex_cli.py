"""Codex CLI as a test drives it: where `make env` installs it, a CODEX_HOME whose config points a model provider at
ingest, and the check that a call it made was captured token-exactly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from transformers import PreTrainedTokenizerBase

from parity.api.common.v1 import llm_call_pb2
from tests.integration.claude_code import decoded_with_special_tokens, decodes_to

REPO = Path(__file__).resolve().parents[2]
CODEX = REPO / ".tools" / "codex" / "node_modules" / ".bin" / "codex"
# Codex's tools and their calls as vLLM's own /v1/responses serves them (tests/unit/ingest/endpoints has what is
# translated): a namespace's custom tools and a grammar's custom tools are free-form custom tools under flat names.
NAMESPACE_SEPARATOR = "__"
# A short system prompt and fewer tools, for runs that train on every call.
SHORT_INSTRUCTIONS = "You are a coding agent. Run shell commands to do the task."


def codex_cli() -> str:
    if not CODEX.exists():
        pytest.fail(
            f"Codex CLI is missing: no {CODEX}. Install it with `make env` (npm).", pytrace=False
        )
    return str(CODEX)


def codex_config(
    home: Path, model: str, base_url: str | None, short: bool = False
) -> dict[str, str]:
    """A CODEX_HOME of its own in `home` (none of this machine's config or logins), with a `parity` model provider
    on ingest's Responses API: `base_url` there, or left to `-c model_providers.parity.base_url=...`. The
    environment that makes Codex use it."""
    lines = [
        f'model = "{model}"',
        'model_provider = "parity"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        'web_search = "disabled"',  # a hosted tool, which ingest refuses
    ]
    if short:
        (home / "instructions.md").write_text(SHORT_INSTRUCTIONS + "\n")
        lines.append(f'model_instructions_file = "{home / "instructions.md"}"')
    lines += [
        "[model_providers.parity]",
        'name = "Parity ingest"',
        'wire_api = "responses"',
        'env_key = "OPENAI_API_KEY"',
    ]
    if base_url is not None:
        lines.append(f'base_url = "{base_url}"')
    if short:
        lines += ["[features]", "goals = false", "apps = false", "[agents]", "enabled = false"]
    (home / "config.toml").write_text("\n".join(lines) + "\n")
    return {"HOME": str(home), "CODEX_HOME": str(home)}


def run_codex(prompt: str, environment: dict[str, str], workdir: Path) -> list[dict[str, Any]]:
    """`codex exec --json`: its events, the last one the finished turn."""
    finished = subprocess.run(
        [codex_cli(), "exec", "--skip-git-repo-check", "--json", prompt],
        env=environment, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    events = [json.loads(line) for line in finished.stdout.splitlines() if line.startswith("{")]
    assert events and events[-1]["type"] == "turn.completed", (
        finished.stderr[-3000:] or finished.stdout[-3000:]
    )
    return events


def as_vllm_serves(request: dict[str, Any]) -> dict[str, Any]:
    """Codex's request as one vLLM's own /v1/responses serves: the tools of `additional_tools` items join `tools`,
    custom tools inside a namespace or with a grammar become free-form custom tools, a hosted tool_search goes (vLLM
    does not show it either), and `configuration_update` items go (they change settings, not the prompt)."""
    items = request["input"]
    declared = list(request.get("tools") or []) + [
        tool for item in items if item.get("type") == "additional_tools" for tool in item["tools"]
    ]
    tools: list[dict[str, Any]] = []
    for tool in declared:
        if (
            tool["type"] == "namespace"
        ):  # one namespace a member, in order: vLLM shows none of its custom tools
            tools += [
                tool | {"tools": [member]} if member["type"] == "function"
                else free_form(member, tool["name"] + NAMESPACE_SEPARATOR + member["name"])
                for member in tool["tools"]
            ]  # fmt: skip
        elif tool["type"] == "custom":
            tools.append(free_form(tool, tool["name"]))
        elif tool["type"] != "tool_search":
            tools.append(tool)
    kept = [
        flat_call(item)
        for item in items
        if item.get("type") not in ("additional_tools", "configuration_update")
    ]
    return request | {"input": kept, "tools": tools}


def flat_call(item: dict[str, Any]) -> dict[str, Any]:
    """A call to a custom tool in a namespace as a call to the free-form tool under its flat name (vLLM flattens a
    function_call's namespace itself)."""
    if item.get("type") != "custom_tool_call" or not item.get("namespace"):
        return item
    flat = {key: value for key, value in item.items() if key != "namespace"}
    return flat | {"name": item["namespace"] + NAMESPACE_SEPARATOR + item["name"]}


def free_form(tool: dict[str, Any], name: str) -> dict[str, Any]:
    return {"type": "custom", "name": name, "description": tool.get("description")}


def check_token_exact(call: llm_call_pb2.LlmCall, vllm_url: str, served_model: str,
                      tokenizer: PreTrainedTokenizerBase) -> None:  # fmt: skip
    """`call` is a call Codex made: its prompt is vLLM's own rendering of the request, its reply the sampled ids."""
    request = json.loads(call.request_json)
    assert call.endpoint == llm_call_pb2.CALL_ENDPOINT_RESPONSES and call.streamed
    assert call.model == request["model"] and call.served_model == served_model
    servable = as_vllm_serves(request) | {"model": served_model}
    render = httpx.post(f"{vllm_url}/v1/responses/render", json=servable, timeout=120)
    assert render.status_code == 200, render.text
    assert np.frombuffer(call.prompt_token_ids, dtype="<i4").tolist() == render.json()["token_ids"]
    choice = call.choices[0]
    sampled = np.frombuffer(choice.token_ids, dtype="<i4").tolist()
    assert len(sampled) == len(choice.logprobs) // 4 > 0
    decoded = tokenizer.decode(sampled, skip_special_tokens=True)
    assert isinstance(decoded, str)
    kept = decoded_with_special_tokens(tokenizer, sampled, choice.finish_reason)
    if "<tool_call>" not in decoded:
        assert decodes_to(decoded, choice.text, choice.finish_reason) or decodes_to(
            kept, choice.text, choice.finish_reason
        ), (choice.finish_reason, decoded, choice.text)

"""Claude Code as a test drives it: where `make env` installs it, the environment that keeps it offline and
short, and the check that a call it made was captured token-exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
from transformers import PreTrainedTokenizerBase

from parity.api.common.v1 import llm_call_pb2

REPO = Path(__file__).resolve().parents[2]
CLAUDE = REPO / ".tools" / "agents" / "node_modules" / ".bin" / "claude"
# Claude Code's system prompt and tool catalogue are about 27,000 tokens of the small model's tokenizer.
LONG_CONTEXT = 65536
REPLACEMENT_CHARACTER = "\ufffd"
TOOL_CALL_START = "<tool_call>"


def claude_code() -> str:
    found = str(CLAUDE) if CLAUDE.exists() else shutil.which("claude")
    if found is None:
        pytest.fail(
            f"Claude Code is missing: no {CLAUDE}. Install it with `make env` (npm).", pytrace=False
        )
    return found


def offline_environment(home: Path) -> dict[str, str]:
    """What Claude Code needs besides its base URL and key: nothing of this machine's, nothing off it."""
    return {
        "HOME": str(home),  # none of this machine's Claude settings or logins
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry or update checks: the host is offline
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "32",  # the small model seldom samples its end token
    }


def answer_text(message: dict) -> str:
    return "".join(block["text"] for block in message["content"] if block["type"] == "text")


def decodes_to(decoded: str, streamed: str, finish_reason: str) -> bool:
    """Whether a whole decode of the sampled ids is the text vLLM streamed. Its streaming detokenizer holds
    back bytes that do not make a whole character yet, so a reply that ends there (cut at max_tokens, or by a
    stop token right after a stray byte) may lack the replacement characters a whole decode ends with (random
    models sample stray bytes)."""
    held_back = decoded.removeprefix(streamed)
    return decoded == streamed or (
        finish_reason in ("length", "stop")
        and decoded.startswith(streamed)
        and set(held_back) == {REPLACEMENT_CHARACTER}
    )


def decoded_with_special_tokens(
    tokenizer: PreTrainedTokenizerBase, sampled: list[int], finish_reason: str
) -> str:
    """The text vLLM streams for a reply to a request with tools: its tool parser (hermes) turns
    skip_special_tokens off, so a special token sampled mid-reply (a random model's <|im_start|>) is in the
    text; the stop token that ends it is not."""
    kept = tokenizer.decode(
        sampled[:-1] if finish_reason == "stop" else sampled, skip_special_tokens=False
    )
    assert isinstance(kept, str)
    return kept


def check_token_exact(call: llm_call_pb2.LlmCall, answer: dict, vllm_url: str, served_model: str,
                      tokenizer: PreTrainedTokenizerBase) -> None:  # fmt: skip
    """`call` is what ingest stored for the reply Claude Code received as `answer` (its assistant message)."""
    request = json.loads(call.request_json)
    assert call.endpoint == llm_call_pb2.CALL_ENDPOINT_ANTHROPIC_MESSAGES and call.streamed
    # The agent's own model name is kept; the policy served it.
    assert call.model == request["model"] == answer["model"] and call.model.startswith("claude-")
    assert call.served_model == served_model

    # The prompt is exactly what vLLM's own /v1/messages renders for that request.
    render = httpx.post(
        f"{vllm_url}/v1/messages/render", json=request | {"model": served_model}, timeout=120
    )
    assert render.status_code == 200, render.text
    assert np.frombuffer(call.prompt_token_ids, dtype="<i4").tolist() == render.json()["token_ids"]

    # What the agent was told is what the sampled ids decode to.
    choice = call.choices[0]
    sampled = np.frombuffer(choice.token_ids, dtype="<i4").tolist()
    assert len(sampled) == len(choice.logprobs) // 4 > 0
    decoded = tokenizer.decode(sampled, skip_special_tokens=True)
    assert isinstance(decoded, str)  # one sequence decodes to one text
    received = answer_text(answer)
    assert choice.text == received
    if TOOL_CALL_START in decoded:
        # From a sampled tool-call token on, the text is the tool parser's reading of it.
        decoded, received = (
            decoded.split(TOOL_CALL_START)[0],
            received[: len(decoded.split(TOOL_CALL_START)[0])],
        )
    kept = decoded_with_special_tokens(tokenizer, sampled, choice.finish_reason)
    kept_received = choice.text
    if TOOL_CALL_START in kept:
        kept = kept.split(TOOL_CALL_START)[0]
        kept_received = kept_received[: len(kept)]
    assert decodes_to(decoded, received, choice.finish_reason) or decodes_to(
        kept, kept_received, choice.finish_reason
    ), (decoded, received)
    tool_uses = [block["name"] for block in answer["content"] if block["type"] == "tool_use"]
    assert [
        tool["function"]["name"] for tool in json.loads(choice.tool_calls_json or b"[]")
    ] == tool_uses

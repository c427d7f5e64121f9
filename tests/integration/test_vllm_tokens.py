"""vLLM returns the exact token ids and the model's own logprobs: what Parity records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from openai import OpenAI
from openai.types.chat import ChatCompletion
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from parity.services.inference.vllm_launcher import VllmServer
from tests.integration.openai_api import as_messages, sampled_logprobs, vllm_field

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

QUESTION = [
    {"role": "system", "content": "You solve arithmetic."},
    {"role": "user", "content": "What is 12 + 7?"},
]
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}
TOOL_ROUND_TRIP = [
    *QUESTION,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expression": "12 + 7"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "19"},
]
# Float32 on both sides; the measured gap is ~5e-7.
LOGPROB_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def client(vllm_server: VllmServer) -> OpenAI:
    return OpenAI(base_url=vllm_server.openai_base_url, api_key="unused")


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def reference_model(tiny_model_dir: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def create(
    client: OpenAI, server: VllmServer, messages: list[dict[str, Any]], **kwargs: Any
) -> ChatCompletion:
    defaults: dict[str, Any] = {"max_tokens": 24, "logprobs": True, "seed": 7}
    return client.chat.completions.create(
        model=server.model_name,
        messages=as_messages(messages),
        extra_body={"return_token_ids": True},
        **(defaults | kwargs),
    )


@pytest.mark.parametrize("n", [1, 2])
def test_token_ids_are_returned_and_match_usage(
    client: OpenAI, vllm_server: VllmServer, n: int
) -> None:
    completion = create(client, vllm_server, QUESTION, n=n, temperature=1.0)
    usage = completion.usage
    assert usage is not None

    assert len(vllm_field(completion, "prompt_token_ids")) == usage.prompt_tokens
    assert len(completion.choices) == n
    for choice in completion.choices:
        assert len(vllm_field(choice, "token_ids")) == len(sampled_logprobs(choice)) > 0
    completion_tokens = sum(len(vllm_field(choice, "token_ids")) for choice in completion.choices)
    assert completion_tokens == usage.completion_tokens


@pytest.mark.parametrize(
    ("messages", "tools"),
    [(QUESTION, None), (TOOL_ROUND_TRIP, [CALCULATOR])],
    ids=["plain", "tools"],
)
def test_prompt_token_ids_equal_local_chat_template(
    client: OpenAI,
    vllm_server: VllmServer,
    tokenizer: PreTrainedTokenizerBase,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
) -> None:
    extra = {"tools": tools} if tools else {}
    completion = create(client, vllm_server, messages, max_tokens=1, **extra)

    expected = tokenizer.apply_chat_template(
        messages,
        tools=None if tools is None else [*tools],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    assert vllm_field(completion, "prompt_token_ids") == expected


@pytest.mark.parametrize(("temperature", "n"), [(1.0, 2), (0.0, 1)], ids=["sampled", "greedy"])
def test_sampled_logprobs_match_transformers_forward(
    client: OpenAI,
    vllm_server: VllmServer,
    reference_model: torch.nn.Module,
    temperature: float,
    n: int,
) -> None:
    # vLLM's default logprobs mode (pinned by the launcher) is raw_logprobs: the model's
    # log_softmax before temperature, so it equals the reference even when sampling at T != 1.
    completion = create(client, vllm_server, QUESTION, n=n, temperature=temperature, max_tokens=32)
    prompt = vllm_field(completion, "prompt_token_ids")

    for choice in completion.choices:
        served = torch.tensor([entry.logprob for entry in sampled_logprobs(choice)])
        sampled = vllm_field(choice, "token_ids")
        with torch.no_grad():
            logits = reference_model(torch.tensor([prompt + sampled])).logits[0]
        # Position i predicts token i + 1: completion tokens are predicted from len(prompt) - 1 on.
        predicting = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
        reference = predicting.gather(1, torch.tensor(sampled)[:, None]).squeeze(1)
        assert (served - reference).abs().max().item() < LOGPROB_TOLERANCE


def test_a_short_agent_prompt_is_a_prefix_cache_hit_when_repeated(
    client: OpenAI, vllm_server: VllmServer
) -> None:
    """A GRPO group's rollouts and an agent's later turns repeat a prompt that is often under vLLM's CPU
    default block (128 tokens), which its prefix cache could never reuse; the launcher's blocks are smaller."""
    messages = [
        {"role": "system", "content": " ".join(f"rule{index}" for index in range(10))},
        QUESTION[1],
    ]
    first = create(client, vllm_server, messages, max_tokens=2)
    again = create(client, vllm_server, messages, max_tokens=2)
    assert first.usage is not None and again.usage is not None
    assert first.usage.prompt_tokens < 128
    assert (
        again.usage.prompt_tokens_details is not None
        and again.usage.prompt_tokens_details.cached_tokens is not None
    )
    assert again.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 32

"""The agent the console's tests train for three steps: two turns around a tool call, each reply's share of tokens
that start a word as its reward."""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletionToolParam

import parity
from tests.integration.openai_api import as_messages, sampled_logprobs

TASKS = [{"id": f"t{n}", "prompt": prompt} for n, prompt in enumerate(
    ["Where is it sunny?", "Pick a city for the trip.", "Which place is calm?", "Say where to sail."])]  # fmt: skip
VAL_TASKS = [{"id": "v0", "prompt": "Choose a harbour."}]
TOOLS: list[ChatCompletionToolParam] = [{"type": "function", "function": {
    "name": "lookup", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["rome", "oslo"]}},
                   "required": ["city"]},
}}]  # fmt: skip
# The random model writes the call as text for vLLM's tool parser, and a call cut short does not parse. Measured on
# the tiny model: 7 of 40 calls parsed within 24 tokens, 30 of 40 within 64. With 64, a run's 24 rollouts all
# missing happens with probability under 1e-14; the console's trajectory test needs one that called the tool.
TOOL_CALL_MAX_TOKENS = 64


async def tool_agent(task: dict[str, Any]) -> float:
    """Asks, gets a tool call (forced, as an agent framework would), runs the tool, and asks again with
    the same tools offered, so the prompt keeps its prefix and only the reply's re-rendering can break it."""
    client = parity.get_async_chat_client()
    sampling: dict[str, Any] = {
        "model": task["model"],
        "max_tokens": task["max_tokens"],
        "temperature": task["temperature"],
    }
    messages: list[dict[str, Any]] = [{"role": "user", "content": task["prompt"]}]
    first = await client.chat.completions.create(
        messages=as_messages(messages),
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "lookup"}},
        **{**sampling, "max_tokens": max(sampling["max_tokens"], TOOL_CALL_MAX_TOKENS)},
    )
    calls = first.choices[0].message.tool_calls or []
    if calls:
        messages += [{"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]},
                     {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny and calm"}]  # fmt: skip
    else:
        # A random model's arguments do not always parse; the agent goes on without the tool.
        messages += [{"role": "assistant", "content": first.choices[0].message.content or ""},
                     {"role": "user", "content": "The lookup failed; answer anyway."}]  # fmt: skip
    second = await client.chat.completions.create(messages=as_messages(messages), tools=TOOLS, tool_choice="none",
                                                  logprobs=True, **sampling)  # fmt: skip
    words = [entry.token for entry in sampled_logprobs(second.choices[0])]
    return 0.5 * bool(calls) + 0.5 * sum(w.startswith(" ") for w in words) / max(1, len(words))

"""Agents of the tests' own that `parity.train()` trains: one that talks for two turns, rewarded on how its replies'
tokens start words, and one whose reward never varies."""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletionMessageParam

import parity
from tests.integration.openai_api import sampled_logprobs

TASKS = [{"id": f"t{n}", "prompt": prompt} for n, prompt in enumerate(
    ["Tell me about your day.", "Describe the sea.", "What do you like?", "Say something kind."])]  # fmt: skip


def word_start_share(token_texts: list[str]) -> float:
    return sum(text.startswith(" ") for text in token_texts) / max(1, len(token_texts))


async def two_turn_agent(task: dict[str, Any]) -> float:
    """Asks, hears back, asks again in the same conversation; rewarded on both replies. Each task
    stands for an end user of a deployed agent, named the way any client can: a header."""
    client = parity.get_async_chat_client()
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": task["prompt"]}]
    shares = []
    for follow_up in ("Say more.", None):
        reply = await client.chat.completions.create(
            model=task["model"], messages=messages, max_tokens=task["max_tokens"], temperature=task["temperature"],
            logprobs=True, extra_headers={"X-Parity-User": f"user-{task['id']}"},
        )  # fmt: skip
        shares.append(
            word_start_share([entry.token for entry in sampled_logprobs(reply.choices[0])])
        )
        if follow_up:
            messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                         {"role": "user", "content": follow_up}]  # fmt: skip
    return sum(shares) / len(shares)


async def constant_agent(task: dict[str, Any]) -> float:
    await two_turn_agent(task)
    return 0.5

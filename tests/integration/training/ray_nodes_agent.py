"""The agent test_ray_nodes.py trains: one chat call, rewarded by the share of its tokens that begin a word."""

from __future__ import annotations

import parity


def speak(task: dict) -> float:
    reply = parity.get_chat_client().chat.completions.create(
        model=task["model"],
        max_tokens=task["max_tokens"],
        temperature=task["temperature"],
        logprobs=True,
        messages=[{"role": "user", "content": task["prompt"]}],
    )
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None  # asked for: logprobs=True
    tokens = [entry.token for entry in logprobs.content]
    return sum(token.startswith(" ") for token in tokens) / max(1, len(tokens))

"""Example (a): a single-call math agent.

    parity train --config examples/math/train.toml

Each task is one arithmetic question; each rollout asks the policy once and is
rewarded 1 when the answer is in the reply, and 0.1 for a reply with any number in
it: an untrained small model is almost never right, and a group whose rewards are all
equal teaches nothing (the assembler drops it), so the partial credit is what gets
learning started. Parity captures the exact tokens through ingest; the trainer fills
in the served model, max_tokens and temperature.
"""

from __future__ import annotations

import re
from typing import Any

import parity


async def solve(task: dict[str, Any]) -> float:
    reply = await parity.get_async_chat_client().chat.completions.create(
        model=task["model"], messages=[{"role": "user", "content": task["question"]}],
        max_tokens=task["max_tokens"], temperature=task["temperature"],
    )  # fmt: skip
    return score(reply.choices[0].message.content or "", task["answer"])


async def solve_strict(task: dict[str, Any]) -> float:
    reply = await parity.get_async_chat_client().chat.completions.create(
        model=task["model"], messages=[{"role": "user", "content": task["question"]}],
        max_tokens=task["max_tokens"], temperature=task["temperature"],
    )  # fmt: skip
    numbers = re.findall(r"\d+", reply.choices[0].message.content or "")
    return 1.0 if numbers and numbers[-1] == task["answer"] else 0.0


def score(text: str, answer: str) -> float:
    """1 for the right number, 0.1 for a reply with any number in it, else 0."""
    if answer in re.findall(r"\d+", text):
        return 1.0
    return 0.1 if re.search(r"\d", text) else 0.0

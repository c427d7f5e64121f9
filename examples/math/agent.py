"""Example (a): a single-call math agent.

    parity train --config examples/math/train.toml

Each task is one arithmetic question; each rollout asks the policy once and is
rewarded 1 when the answer is in the reply. Parity captures the exact tokens through
ingest; the trainer fills in the served model, max_tokens and temperature.
"""

from __future__ import annotations

from typing import Any

import parity


async def solve(task: dict[str, Any]) -> float:
    reply = await parity.get_async_chat_client().chat.completions.create(
        model=task["model"], messages=[{"role": "user", "content": task["question"]}],
        max_tokens=task["max_tokens"], temperature=task["temperature"],
    )  # fmt: skip
    return 1.0 if task["answer"] in (reply.choices[0].message.content or "") else 0.0

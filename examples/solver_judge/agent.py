"""Example (b): a solver–judge workflow: two trajectories per episode, per-step rewards.

    parity train --config examples/solver_judge/train.toml

The solver drafts an answer, then revises it (two steps). The judge, a second
trajectory of the same episode, checks the final answer. Each solver step gets its
own reward (the math example's score: 1 for the right number, 0.1 for any number); the
judge's verdict is the judge trajectory's reward. The agent returns None: every reward
is reported with parity.reward(), and validation scores an episode by the solver's last
step (`val_trajectory = "solver"` in train.toml).
"""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletionMessageParam

import parity
from examples.math.agent import score


async def ask(
    task: dict[str, Any], messages: list[ChatCompletionMessageParam], max_tokens: int | None = None
) -> str:
    reply = await parity.get_async_chat_client().chat.completions.create(
        model=task["model"], messages=messages, max_tokens=max_tokens or task["max_tokens"],
        temperature=task["temperature"],
    )  # fmt: skip
    return reply.choices[0].message.content or ""


@parity.trajectory(name="solver")
async def solve(task: dict[str, Any]) -> str:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": task["question"]}]
    draft = await ask(task, messages)
    await parity.areward(score(draft, task["answer"]), step=0)
    messages += [
        {"role": "assistant", "content": draft},
        {"role": "user", "content": "Check and give the final number."},
    ]
    final = await ask(task, messages)
    await parity.areward(score(final, task["answer"]), step=1)
    return final


@parity.trajectory(name="judge")
async def judge(task: dict[str, Any], answer: str) -> None:
    question = f"Question: {task['question']}\nAnswer: {answer}\nCorrect? yes or no."
    verdict = await ask(task, [{"role": "user", "content": question}], max_tokens=4)
    # The judge is rewarded for agreeing with the ground truth.
    correct = score(answer, task["answer"]) == 1.0
    await parity.areward(1.0 if ("yes" in verdict.lower()) == correct else 0.0)


async def episode(task: dict[str, Any]) -> None:
    answer = await solve(task)
    await judge(task, answer)

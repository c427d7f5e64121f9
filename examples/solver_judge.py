"""Example (b): a solver–judge workflow: two trajectories per episode, per-step rewards.

    parity up                       # in another terminal
    .venv/bin/python examples/solver_judge.py --model model

The solver drafts an answer, then revises it (two steps). The judge, a second
trajectory of the same episode, checks the final answer. Each solver step gets its
own reward; the judge's verdict is the judge trajectory's reward. The agent returns
None: every reward is reported with parity.reward().
"""

from __future__ import annotations

import argparse
import asyncio

import parity
from examples.math_agent import make_tasks
from parity import engine


def build_agent(model: str):
    client = parity.get_async_chat_client()

    async def ask(messages: list[dict], max_tokens: int = 16) -> str:
        reply = await client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens)
        return reply.choices[0].message.content or ""

    @parity.trajectory(name="solver")
    async def solve(task: dict) -> str:
        messages = [{"role": "user", "content": task["question"]}]
        draft = await ask(messages)
        await parity.areward(1.0 if task["answer"] in draft else 0.0, step=0)
        messages += [{"role": "assistant", "content": draft}, {"role": "user", "content": "Check and give the final number."}]
        final = await ask(messages)
        await parity.areward(1.0 if task["answer"] in final else 0.0, step=1)
        return final

    @parity.trajectory(name="judge")
    async def judge(task: dict, answer: str) -> None:
        verdict = await ask([{"role": "user", "content": f"Question: {task['question']}\nAnswer: {answer}\nCorrect? yes or no."}], 4)
        # The judge is rewarded for agreeing with the ground truth.
        correct = task["answer"] in answer
        await parity.areward(1.0 if ("yes" in verdict.lower()) == correct else 0.0)

    async def episode(task: dict) -> None:
        answer = await solve(task)
        await judge(task, answer)

    return episode


def main(argv: list[str] | None = None) -> list[engine.RolloutResult]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="model", help="the served policy model")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--rollouts", type=int, default=2)
    args = parser.parse_args(argv)
    config = engine.EngineConfig(rollouts_per_task=args.rollouts, concurrency=8, timeout_s=120)
    results = asyncio.run(engine.AgentEngine(build_agent(args.model), config).arun(make_tasks(args.tasks)))
    print(f"{len(results)} episodes, {sum(r.outcome == 'succeeded' for r in results)} succeeded")
    return results


if __name__ == "__main__":
    main()

"""Example (a): a single-call math agent, run by the agent engine.

    parity up                       # in another terminal
    .venv/bin/python examples/math_agent.py --model model

Each task is one arithmetic question; each rollout asks the policy once and returns
its reward. Parity captures the exact tokens through ingest; the engine closes
every session with its reward, and the assembler turns the groups into samples.
"""

from __future__ import annotations

import argparse
import asyncio
import random

import parity
from parity import engine


def make_tasks(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    tasks = []
    for index in range(count):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        tasks.append({"id": f"add-{index}", "question": f"What is {a} + {b}? Answer with the number.", "answer": str(a + b)})
    return tasks


def build_agent(model: str):
    client = parity.get_async_chat_client()

    async def solve(task: dict) -> float:
        reply = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": task["question"]}], max_tokens=16, temperature=1.0
        )
        return 1.0 if task["answer"] in (reply.choices[0].message.content or "") else 0.0

    return solve


def main(argv: list[str] | None = None) -> list[engine.RolloutResult]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="model", help="the served policy model")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=4)
    args = parser.parse_args(argv)
    agent = build_agent(args.model)
    config = engine.EngineConfig(rollouts_per_task=args.rollouts, concurrency=16, timeout_s=120)
    results = asyncio.run(engine.AgentEngine(agent, config).arun(make_tasks(args.tasks)))
    solved = sum(r.reward or 0.0 for r in results if r.outcome == "succeeded")
    print(f"{len(results)} rollouts, mean reward {solved / max(len(results), 1):.3f}")
    return results


if __name__ == "__main__":
    main()

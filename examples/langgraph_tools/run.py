"""Example (c): train a LangGraph tool-using agent without changing it.

    parity up                       # in another terminal
    .venv/bin/python -m examples.langgraph_tools.run --model model

The graph (graph.py) imports nothing from Parity. Each rollout builds it with the
session's base URL, which is the only thing Parity changes.
"""

from __future__ import annotations

import argparse

import parity
from examples.langgraph_tools.graph import ask, build_graph
from examples.math_agent import make_tasks
from parity import engine


def build_agent(model: str):
    def episode(task: dict) -> float:
        # A sync agent: the engine runs it in a thread that carries the session.
        graph = build_graph(parity.session_url(), model)
        return 1.0 if task["answer"] in ask(graph, task["question"]) else 0.0

    return episode


def main(argv: list[str] | None = None) -> list[engine.RolloutResult]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="model", help="the served policy model")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--rollouts", type=int, default=2)
    args = parser.parse_args(argv)
    config = engine.EngineConfig(rollouts_per_task=args.rollouts, concurrency=4, timeout_s=180)
    results = engine.AgentEngine(build_agent(args.model), config).run(make_tasks(args.tasks))
    print(f"{len(results)} episodes, mean reward {sum(r.reward or 0 for r in results) / max(len(results), 1):.3f}")
    return results


if __name__ == "__main__":
    main()

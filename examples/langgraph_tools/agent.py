"""Example (c): train a LangGraph tool-using agent without changing it.

    parity train --config examples/langgraph_tools/train.toml

The graph (graph.py) imports nothing from Parity. Each rollout builds it with the
session's base URL, which is the only thing Parity changes.
"""

from __future__ import annotations

from typing import Any

import parity
from examples.langgraph_tools.graph import ask, build_graph


def episode(task: dict[str, Any]) -> float:
    # A sync agent: the engine runs it in a thread that carries the session.
    graph = build_graph(parity.session_url(), task["model"], max_tokens=task["max_tokens"],
                        temperature=task["temperature"])  # fmt: skip
    return 1.0 if task["answer"] in ask(graph, task["question"]) else 0.0

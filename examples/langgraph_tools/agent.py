"""Example (c): train a LangGraph tool-using agent without changing it.

    parity train --config examples/langgraph_tools/train.toml

The graph (graph.py) imports nothing from Parity. Each rollout builds it with the
session's base URL and API key, the only things Parity changes.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.messages import ToolMessage

import parity
from examples.langgraph_tools.graph import ask, build_graph


def episode(task: dict[str, Any]) -> float:
    """1 for the right number in the final answer; 0.5 for having used the calculator correctly on the way (a
    tool result that is a number rather than an error); 0.1 for a final answer with any number in it, as the math
    example gives: the steps an untrained model can learn first, and rewards that vary within a task's rollouts."""
    # A sync agent: the engine runs it in a thread that carries the session.
    # The key too: `parity train`'s stack checks tokens, and this is the agent token it made.
    graph = build_graph(parity.session_url(), task["model"], api_key=parity.current_config().api_key,
                        max_tokens=task["max_tokens"], temperature=task["temperature"])  # fmt: skip
    conversation = ask(graph, task["question"])
    if task["answer"] in str(conversation[-1].content):
        return 1.0
    used_tool = any(
        isinstance(m, ToolMessage) and str(m.content).lstrip("-").isdigit() for m in conversation
    )
    if used_tool:
        return 0.5
    return 0.1 if re.search(r"\d", str(conversation[-1].content)) else 0.0

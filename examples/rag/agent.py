"""The seed's third tutorial: a LangGraph agent that answers from a corpus it searches.

    parity train --config examples/rag/train.toml

The agent (graph.py) looks a town up in a generated gazetteer with SQLite's full-text search
(corpus.py), reads the entry, and answers in a later turn. The reward is the answer's: 1 when
the last number of the final reply is the asked fact, else 0. The facts exist nowhere but in
the corpus, so the policy scores only by searching for the right town and copying the right
number out of what comes back.
"""

from __future__ import annotations

import re
from typing import Any

import parity
from examples.rag.corpus import library
from examples.rag.graph import ask, build_graph

NUMBER = re.compile(r"\d+")


def answer_reward(reply: str, answer: str) -> float:
    numbers = NUMBER.findall(reply.replace(",", ""))
    return 1.0 if numbers and numbers[-1] == answer else 0.0


def episode(task: dict[str, Any]) -> float:
    # A sync agent: the engine runs it in a thread that carries the session. The key is the agent token the
    # stack made (`parity train`'s stack checks tokens).
    graph = build_graph(parity.session_url(), task["model"], library().search, api_key=parity.current_config().api_key,
                        max_tokens=task["max_tokens"], temperature=task["temperature"])  # fmt: skip
    conversation = ask(graph, task["question"])
    return answer_reward(str(conversation[-1].content), task["answer"])

"""A retrieval agent in plain LangGraph: it searches a corpus, reads what comes back, and answers.
Nothing here knows about Parity: it is configured by a base URL, like any OpenAI-compatible deployment.

The tool protocol is text, and the first turn always searches: the model's first reply is the
query (`SEARCH <words>`, or its words alone), the entry found comes back as the next user turn,
and a later reply either searches again the same way or is the answer. The default model's chat
template has no tool-calling format (SmolLM2-135M-Instruct was not trained on tool calls), and
left to choose it answers from memory, so no rollout is ever right and there is nothing to learn
from. Searching first, it is right often enough to learn what retrieval needs: a query that finds
the entry, and the right fact read out of it (docs/design/rag-tool-protocol.md).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

MAX_MODEL_CALLS = 3
SYSTEM = (
    "You answer questions about towns from a gazetteer. First reply SEARCH followed by the town's name; "
    "then answer from the result."
)
EXAMPLE = [
    HumanMessage("In what year was Brightwater founded?"),
    AIMessage("SEARCH Brightwater"),
    HumanMessage(
        "Result: Brightwater is a town on the river Lune. It was founded in 1534 and has 2210 inhabitants."
    ),
    AIMessage("1534"),
]
SEARCH_COMMAND = re.compile(r"SEARCH\s*:?\s*(.+)", re.IGNORECASE | re.DOTALL)


class AgentState(TypedDict):
    messages: Annotated[list[AnyMessage], operator.add]
    model_calls: int


def build_graph(base_url: str, model: str, search: Callable[[str], str], *, api_key: str = "unused",
                max_tokens: int = 16, temperature: float = 1.0):  # fmt: skip
    llm = ChatOpenAI(
        base_url=base_url,
        api_key=api_key,
        model=model,
        max_tokens=max_tokens,
        temperature=temperature,
    )

    def think(state: AgentState) -> dict:
        return {
            "messages": [llm.invoke(state["messages"])],
            "model_calls": state["model_calls"] + 1,
        }

    def look_up(state: AgentState) -> dict:
        reply = str(state["messages"][-1].content)
        command = SEARCH_COMMAND.search(reply)
        return {
            "messages": [HumanMessage(f"Result: {search(command.group(1) if command else reply)}")]
        }

    def route(state: AgentState) -> str:
        first = state["model_calls"] == 1
        wants_search = SEARCH_COMMAND.search(str(state["messages"][-1].content)) is not None
        return (
            "look_up" if (first or wants_search) and state["model_calls"] < MAX_MODEL_CALLS else END
        )

    graph = StateGraph(AgentState)
    graph.add_node("think", think)
    graph.add_node("look_up", look_up)
    graph.add_edge(START, "think")
    graph.add_conditional_edges("think", route, ["look_up", END])
    graph.add_edge("look_up", "think")
    return graph.compile()


def ask(graph, question: str) -> list[AnyMessage]:
    """The whole conversation, the agent's final answer last."""
    state = graph.invoke(
        {"messages": [SystemMessage(SYSTEM), *EXAMPLE, HumanMessage(question)], "model_calls": 0}
    )
    return state["messages"]

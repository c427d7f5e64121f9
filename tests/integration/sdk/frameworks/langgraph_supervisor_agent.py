"""LangGraph: a supervisor that hands the task to two workers in turn, each a node with its own conversation, all
in one Parity session; the supervisor's routing is the graph's (the small model cannot choose)."""

import json
import os
import sys
from typing import Literal, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

import parity

ORDER = ["researcher", "writer", "researcher", "writer"]


class Team(TypedDict):
    supervisor: list[BaseMessage]
    researcher: list[BaseMessage]
    writer: list[BaseMessage]
    handoffs: int


def main(session_id: str) -> None:
    with parity.session(session_id, history_mode="exact_history"):  # Parity
        llm = ChatOpenAI(model=os.environ["AGENT_MODEL"], base_url=parity.session_url(), api_key="unused",  # Parity
                         max_tokens=8)  # fmt: skip

        def supervisor(state: Team) -> dict:
            reply = llm.invoke(state["supervisor"])
            return {"supervisor": [*state["supervisor"], reply]}

        def worker(name: Literal["researcher", "writer"]):
            def node(state: Team) -> dict:
                brief = HumanMessage(f"The supervisor asks: {state['supervisor'][-1].content}")
                history = [*state[name], brief]
                reply = llm.invoke(history)
                report = HumanMessage(f"The {name} answered: {reply.content}")
                return {name: [*history, reply], "supervisor": [*state["supervisor"], report],
                        "handoffs": state["handoffs"] + 1}  # fmt: skip

            return node

        def route(state: Team) -> str:
            return ORDER[state["handoffs"]] if state["handoffs"] < len(ORDER) else END

        graph = StateGraph(Team)
        graph.add_node("supervisor", supervisor)
        graph.add_node("researcher", worker("researcher"))
        graph.add_node("writer", worker("writer"))
        graph.add_edge(START, "supervisor")
        graph.add_conditional_edges("supervisor", route)
        graph.add_edge("researcher", "supervisor")
        graph.add_edge("writer", "supervisor")
        out = graph.compile().invoke({
            "supervisor": [HumanMessage("You lead a team. Plan the sum of two and two.")],
            "researcher": [HumanMessage("You are the researcher. Find facts.")],
            "writer": [HumanMessage("You are the writer. Write it up.")],
            "handoffs": 0,
        })  # fmt: skip
    last = out["supervisor"][-1]
    print(json.dumps({"answer": last.content if isinstance(last, AIMessage) else None}))


main(sys.argv[1])

"""LangGraph: a one-node graph around langchain-openai's ChatOpenAI."""

import json
import os
import sys

from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

import parity


def main(session_id: str) -> None:
    with parity.session(session_id):  # Parity
        llm = ChatOpenAI(model=os.environ["AGENT_MODEL"], base_url=parity.session_url(), api_key="unused",  # Parity
                         max_tokens=16)  # fmt: skip
        graph = StateGraph(MessagesState)
        graph.add_node("model", lambda state: {"messages": [llm.invoke(state["messages"])]})
        graph.add_edge(START, "model")
        graph.add_edge("model", END)
        out = graph.compile().invoke({"messages": [HumanMessage("Say hello.")]})
    print(json.dumps({"answer": out["messages"][-1].content}))


main(sys.argv[1])

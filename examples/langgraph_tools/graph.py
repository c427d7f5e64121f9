"""A multi-turn, tool-using agent in plain LangGraph. Nothing here knows about Parity:
it is configured by a base URL, like any OpenAI-compatible deployment."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

MAX_MODEL_CALLS = 3


@tool
def calculator(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class AgentState(TypedDict):
    messages: Annotated[list[AnyMessage], operator.add]
    model_calls: int


def build_graph(
    base_url: str,
    model: str,
    api_key: str = "unused",
    max_tokens: int = 48,
    temperature: float = 1.0,
):
    llm = ChatOpenAI(
        base_url=base_url,
        api_key=api_key,
        model=model,
        max_tokens=max_tokens,
        temperature=temperature,
    )
    # Ask for the tool on every turn but the last, so each episode feeds tool results back.
    with_tool = llm.bind_tools(
        [calculator], tool_choice={"type": "function", "function": {"name": "calculator"}}
    )

    def agent(state: AgentState) -> dict:
        last_turn = state["model_calls"] + 1 >= MAX_MODEL_CALLS
        reply: AnyMessage
        try:
            reply = (llm if last_turn else with_tool).invoke(state["messages"])
        except ValueError as error:
            # The reply could not be parsed (e.g. tool arguments that are not an object):
            # say so and let the model try again, as a robust agent loop does.
            reply = HumanMessage(
                f"Your last reply could not be used ({type(error).__name__}). Call the calculator again."
            )
        return {"messages": [reply], "model_calls": state["model_calls"] + 1}

    def run_tool(args: dict[str, Any]) -> str:
        try:
            return str(calculator.invoke(args))
        except ValueError as error:
            return f"error: {error}"

    def tools(state: AgentState) -> dict:
        reply = state["messages"][-1]
        assert isinstance(reply, AIMessage)  # route() sends only a reply with tool calls here
        results = [
            ToolMessage(content=run_tool(call["args"]), tool_call_id=call["id"])
            for call in reply.tool_calls
        ]
        # A malformed call gets its error back as the tool result, as a real tool runtime would.
        results += [
            ToolMessage(
                content=f"error: could not parse arguments {bad.get('args')!r}",
                tool_call_id=bad.get("id") or "bad",
            )
            for bad in reply.invalid_tool_calls
        ]
        return {"messages": results}

    def nudge(state: AgentState) -> dict:
        return {"messages": [HumanMessage("Use the calculator tool to compute it.")]}

    def route(state: AgentState) -> str:
        reply = state["messages"][-1]
        if state["model_calls"] >= MAX_MODEL_CALLS:
            return END
        if isinstance(reply, HumanMessage):
            return "agent"
        if isinstance(reply, AIMessage) and (reply.tool_calls or reply.invalid_tool_calls):
            return "tools"
        # A tool turn that produced no tool call (e.g. cut off by max_tokens): ask again.
        return "nudge"

    graph = StateGraph(AgentState)
    graph.add_node("agent", agent)
    graph.add_node("tools", tools)
    graph.add_node("nudge", nudge)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["agent", "tools", "nudge", END])
    graph.add_edge("tools", "agent")
    graph.add_edge("nudge", "agent")
    return graph.compile()


def ask(graph, question: str) -> list[AnyMessage]:
    """The whole conversation the graph had about `question`, its final answer last."""
    return graph.invoke({"messages": [HumanMessage(question)], "model_calls": 0})["messages"]

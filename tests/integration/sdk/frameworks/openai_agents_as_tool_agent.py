"""The OpenAI Agents SDK: an orchestrator that calls a researcher agent as a tool, on Chat Completions, all in one
Parity session. The first turn must call the tool (tool_choice; the small model would not choose to)."""

import json
import os
import sys
from dataclasses import dataclass
from typing import Literal

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

import parity

set_tracing_disabled(True)  # its traces go to OpenAI's servers; this host is offline


@dataclass
class Question:
    # A closed set: the small model's arguments are then always valid JSON within its few tokens.
    topic: Literal["sum", "product"]


def main(session_id: str) -> None:
    with parity.session(session_id, history_mode="exact_history"):  # Parity
        client = AsyncOpenAI(base_url=parity.session_url(), api_key="unused")  # Parity
        model = OpenAIChatCompletionsModel(os.environ["AGENT_MODEL"], client)
        researcher = Agent(name="researcher", instructions="Answer in one word.", model=model,
                           model_settings=ModelSettings(max_tokens=8))  # fmt: skip
        orchestrator = Agent(
            name="orchestrator", instructions="Ask the researcher, then answer.", model=model,
            tools=[researcher.as_tool(tool_name="ask_researcher", tool_description="Asks the researcher.",
                                      parameters=Question)],
            # Room for the whitespace vLLM's JSON grammar lets a random model put between the call's tokens.
            model_settings=ModelSettings(max_tokens=160, tool_choice="ask_researcher"),
        )  # fmt: skip
        try:
            answer, stopped = (
                Runner.run_sync(orchestrator, "What is two plus two?", max_turns=3).final_output,
                None,
            )
        except Exception as error:  # noqa: BLE001 - the test judges which stops are the model's doing
            answer, stopped = None, f"{type(error).__name__}: {error}"
    print(json.dumps({"answer": answer, "stopped": stopped}))


main(sys.argv[1])

"""The OpenAI Agents SDK on its default model, the Responses API."""

import json
import os
import sys

from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

import parity

set_tracing_disabled(True)  # its traces go to OpenAI's servers; this host is offline


def main(session_id: str) -> None:
    with parity.session(session_id):  # Parity
        client = AsyncOpenAI(base_url=parity.session_url(), api_key="unused")  # Parity
        agent = Agent(name="greeter", instructions="Answer in one word.",
                      model=OpenAIResponsesModel(os.environ["AGENT_MODEL"], client),
                      model_settings=ModelSettings(max_tokens=16))  # fmt: skip
        try:
            answer, stopped = Runner.run_sync(agent, "Say hello.").final_output, None
        except Exception as error:  # noqa: BLE001 - the test judges which stops are the model's doing
            answer, stopped = None, f"{type(error).__name__}: {error}"
    print(json.dumps({"answer": answer, "stopped": stopped}))


main(sys.argv[1])

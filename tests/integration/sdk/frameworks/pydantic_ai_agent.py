"""Pydantic AI: an Agent on its OpenAI chat model and provider."""

import json
import os
import sys

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import parity


def main(session_id: str) -> None:
    with parity.session(session_id):  # Parity
        provider = OpenAIProvider(base_url=parity.session_url(), api_key="unused")  # Parity
        agent = Agent(OpenAIChatModel(os.environ["AGENT_MODEL"], provider=provider), instructions="Answer in one word.",
                      model_settings={"max_tokens": 16})  # fmt: skip
        result = agent.run_sync("Say hello.")
    print(json.dumps({"answer": result.output}))


main(sys.argv[1])

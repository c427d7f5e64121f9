"""AutoGen: an AssistantAgent on autogen-ext's OpenAI chat-completions client."""

import asyncio
import json
import os
import sys

from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.openai import OpenAIChatCompletionClient

import parity

MODEL_INFO = {"vision": False, "function_calling": False, "json_output": False, "structured_output": False,
              "family": "unknown"}  # fmt: skip


async def main(session_id: str) -> None:
    with parity.session(session_id):  # Parity
        client = OpenAIChatCompletionClient(
            model=os.environ["AGENT_MODEL"],
            base_url=parity.session_url(),
            api_key="unused",  # Parity
            model_info=MODEL_INFO,
            max_tokens=16,
        )
        agent = AssistantAgent(
            "assistant", model_client=client, system_message="Answer in one word."
        )
        result = await agent.run(task="Say hello.")
        await client.close()
    print(json.dumps({"answer": result.messages[-1].content}))


asyncio.run(main(sys.argv[1]))

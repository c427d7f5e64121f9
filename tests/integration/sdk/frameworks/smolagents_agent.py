"""smolagents: a CodeAgent on its OpenAI-compatible model class."""

import json
import os
import sys

from smolagents import CodeAgent, OpenAIModel

import parity


def main(session_id: str) -> None:
    with parity.session(session_id):  # Parity
        model = OpenAIModel(model_id=os.environ["AGENT_MODEL"], api_base=parity.session_url(), api_key="unused",  # Parity
                            max_tokens=16)  # fmt: skip
        agent = CodeAgent(tools=[], model=model, max_steps=1, verbosity_level=0)
        answer = agent.run("Say hello.")
    print(json.dumps({"answer": str(answer)}))


main(sys.argv[1])

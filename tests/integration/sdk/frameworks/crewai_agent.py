"""CrewAI: one agent, one task, one crew, on CrewAI's LLM class."""

import json
import os
import sys

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # this host is offline
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

from crewai import LLM, Agent, Crew, Task  # noqa: E402

import parity  # noqa: E402


def main(session_id: str) -> None:
    with parity.session(session_id):  # Parity
        llm = LLM(model=f"openai/{os.environ['AGENT_MODEL']}", base_url=parity.session_url(), api_key="unused",  # Parity
                  max_tokens=16)  # fmt: skip
        agent = Agent(
            role="Greeter", goal="Greet people", backstory="You are brief.", llm=llm, max_iter=1
        )
        task = Task(description="Say hello.", expected_output="A greeting.", agent=agent)
        result = Crew(agents=[agent], tasks=[task]).kickoff()
    print(json.dumps({"answer": str(result)}))


main(sys.argv[1])

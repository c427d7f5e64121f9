"""The Claude Agent SDK, which drives the Claude Code CLI bundled in its wheel, over /v1/messages."""

import asyncio
import json
import sys

from claude_agent_sdk import AssistantMessage, ClaudeAgentOptions, ResultMessage, TextBlock, query

import parity

OFFLINE = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry or update checks: the host is offline
    "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "32",  # the small model seldom samples its end token
}


async def main(session_id: str) -> None:
    answer, replies, stopped = None, [], None
    with parity.session(session_id):  # Parity
        env = {
            "ANTHROPIC_BASE_URL": parity.session_url(api="anthropic"),
            "ANTHROPIC_API_KEY": "unused",
        }  # Parity
        options = ClaudeAgentOptions(max_turns=1, env=env | OFFLINE)
        try:
            async for message in query(prompt="Say hello.", options=options):
                if isinstance(message, AssistantMessage) and message.model != "<synthetic>":
                    replies.append(
                        "".join(b.text for b in message.content if isinstance(b, TextBlock))
                    )
                if isinstance(message, ResultMessage):
                    answer = message.result
        except Exception as error:  # noqa: BLE001 - the test judges which stops are the model's doing
            stopped = f"{type(error).__name__}: {error}"
    print(json.dumps({"answer": answer, "replies": replies, "stopped": stopped}))


asyncio.run(main(sys.argv[1]))

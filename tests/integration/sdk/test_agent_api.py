"""The agent-facing SDK against a real ingest, store and vLLM: every call lands in its session."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

import parity

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]
MAX_TOOL_SAMPLES = 8
TOOLS: list[ChatCompletionToolParam] = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def point_sdk_at_the_stack(ingest_stack):
    previous = parity.current_config()
    parity.configure(
        ingest_url=f"http://127.0.0.1:{ingest_stack.http_port}",
        store_address=ingest_stack.store.address,
    )
    yield
    parity.configure(**{k: getattr(previous, k) for k in ("ingest_url", "store_address")})


def test_sync_client_streaming_and_not_in_nested_sessions(ingest_stack, vllm_server) -> None:
    client = parity.get_chat_client()
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    with parity.session("sdk-root", task="t1"):
        client.chat.completions.create(
            model=vllm_server.model_name, messages=messages, max_tokens=3
        )
        with parity.session("sdk-child", trajectory="judge", rubric="r1"):
            text = "".join(
                chunk.choices[0].delta.content or ""
                for chunk in client.chat.completions.create(
                    model=vllm_server.model_name, messages=messages, max_tokens=3, stream=True)
                if chunk.choices
            )  # fmt: skip
            # A random model does not always produce a parseable tool call; sample until it does.
            for _ in range(MAX_TOOL_SAMPLES):
                tooled_reply = client.chat.completions.create(
                    model=vllm_server.model_name, messages=messages, max_tokens=40, tools=TOOLS,
                    tool_choice={"type": "function", "function": {"name": "add"}},
                )  # fmt: skip
                if tooled_reply.choices[0].message.tool_calls:
                    break
    (root_call,) = ingest_stack.calls("sdk-root")
    assert dict(root_call.metadata) == {"task": "t1"} and not root_call.parent_session_ids
    streamed, *tool_samples = ingest_stack.calls("sdk-child")
    tooled = tool_samples[-1]
    assert (list(streamed.parent_session_ids), streamed.trajectory_name) == (["sdk-root"], "judge")
    assert dict(streamed.metadata) == {"task": "t1", "rubric": "r1"}
    assert streamed.streamed and streamed.choices[0].text == text
    tool_calls = tooled_reply.choices[0].message.tool_calls
    assert tool_calls, f"no tool call in {MAX_TOOL_SAMPLES} samples"
    expected = [call.model_dump() for call in tool_calls]
    assert json.loads(tooled.choices[0].tool_calls_json) == expected


def test_hundreds_of_concurrent_sessions_never_cross(ingest_stack, vllm_server) -> None:
    client = parity.get_async_chat_client()

    @parity.trajectory(name="agent")
    async def agent(index: int) -> None:
        for turn in range(2):
            await client.chat.completions.create(
                model=vllm_server.model_name, max_tokens=2,
                messages=[{"role": "user", "content": f"I am session {index}, turn {turn}"}],
            )  # fmt: skip

    async def episode(index: int) -> None:
        async with parity.session(f"crowd-{index}"):
            await agent(index)

    async def everyone() -> None:
        await asyncio.gather(*(episode(i) for i in range(200)))

    asyncio.run(everyone())
    for index in range(200):
        calls = ingest_stack.calls(f"crowd-{index}")
        assert [json.loads(c.request_json)["messages"][0]["content"] for c in calls] == [
            f"I am session {index}, turn 0",
            f"I am session {index}, turn 1",
        ]
        assert all(c.trajectory_name == "agent" for c in calls)


def test_a_subprocess_agent_given_only_a_url(ingest_stack, vllm_server) -> None:
    # Any program in any language: it gets a base URL and nothing of Parity.
    script = (
        "import os, json, urllib.request\n"
        "body = json.dumps({'model': os.environ['MODEL'], 'max_tokens': 2,"
        " 'messages': [{'role': 'user', 'content': 'from a sandbox'}]}).encode()\n"
        "request = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', body,"
        " {'Content-Type': 'application/json'})\n"
        "print(json.load(urllib.request.urlopen(request))['choices'][0]['message']['role'])\n"
    )
    with parity.session("sandboxed", sandbox="yes"):
        url = parity.session_url()
    result = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60, check=True,
        env={"OPENAI_BASE_URL": url, "MODEL": vllm_server.model_name},
    )  # fmt: skip
    assert result.stdout.strip() == "assistant"
    (call,) = ingest_stack.calls("sandboxed")
    assert dict(call.metadata) == {"sandbox": "yes"}

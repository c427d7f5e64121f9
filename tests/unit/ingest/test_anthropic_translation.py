"""/v1/messages requests as the chat requests ingest sends vLLM."""

from __future__ import annotations

from parity.services.ingest.endpoints.anthropic_messages.protocol import to_chat_request

HELLO = [{"role": "user", "content": "Say hello."}]


def test_an_empty_tool_list_is_no_tools_as_vllms_own_messages_endpoint_renders_it() -> None:
    # Claude Code with `--tools ''` sends `tools: []`; vLLM's chat API would refuse the empty array.
    for tool_choice in ({}, {"tool_choice": {"type": "auto"}}):
        chat = to_chat_request({"model": "m", "max_tokens": 8, "messages": HELLO, "tools": [], **tool_choice},
                               merge_inline_system=False)  # fmt: skip
        assert "tools" not in chat and "tool_choice" not in chat
    tool = {"name": "add", "input_schema": {"type": "object", "properties": {}}}
    chat = to_chat_request(
        {"model": "m", "max_tokens": 8, "messages": HELLO, "tools": [tool]},
        merge_inline_system=False,
    )
    assert [t["function"]["name"] for t in chat["tools"]] == ["add"] and chat[
        "tool_choice"
    ] == "auto"

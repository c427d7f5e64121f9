"""Codex CLI's Responses requests as the chat requests ingest sends vLLM: its items become the messages vLLM's own
/v1/responses builds (tests/integration/ingest compares the rendered tokens), its configuration updates become
settings, and what still cannot be served is refused with a 400 naming the item."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parity.services.ingest.endpoints.openai_responses import protocol
from parity.services.ingest.endpoints.openai_responses.tool_catalog import tool_catalog
from parity.services.ingest.openai_errors import HttpError
from tests.unit.ingest.endpoints.openai_responses.test_tool_catalog import codex_request

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it."}]}
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"


def chat_of(request: dict[str, Any]) -> dict[str, Any]:
    protocol.check_request(request)
    return protocol.to_chat_request(
        request, protocol.input_messages(request, []), "policy", tool_catalog(request)
    )


def test_codexs_request_becomes_its_messages_and_tools_without_its_tool_declarations() -> None:
    request = codex_request("gpt-6.2-sol")
    chat = chat_of(request)
    kinds = [item["type"] for item in request["input"]]
    # Every item but the tool declaration is a message (the shell call opens an assistant turn of its own).
    assert kinds.count("additional_tools") == 1 and len(chat["messages"]) == len(kinds) - 1
    roles = [message["role"] for message in chat["messages"]]
    assert roles == ["developer"] * 4 + ["user", "user", "assistant", "tool"]
    assert chat["messages"][-2]["tool_calls"][0]["function"]["name"] == "exec_command"
    assert [tool["function"]["name"] for tool in chat["tools"]][:2] == [
        "functions__exec",
        "functions__wait",
    ]
    # tool_choice "auto" with tools only from additional_tools is still "auto"; effort low is Codex's default.
    assert chat["tool_choice"] == "auto" and chat["reasoning_effort"] == "low"
    assert chat["stream"] is True and chat["parallel_tool_calls"] is False


def test_custom_and_namespaced_calls_replay_as_the_tool_calls_the_policy_made() -> None:
    request = {"model": "m", "tools": codex_request("gpt-5.5")["tools"][:4], "input": [
        USER,
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": PATCH, "status": "completed"},
        {"type": "function_call", "call_id": "c2", "namespace": "clock", "name": "sleep", "arguments": "{}"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done!"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "slept"}]},
    ]}  # fmt: skip
    messages = chat_of(request)["messages"]
    assert messages[1] == {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "apply_patch", "arguments": json.dumps({"input": PATCH})}},
        {"id": "c2", "type": "function", "function": {"name": "clock__sleep", "arguments": "{}"}},
    ]}  # fmt: skip
    assert messages[2] == {"role": "tool", "content": "Done!", "tool_call_id": "c1"}
    assert messages[3]["tool_call_id"] == "c2" and len(messages) == 4


def test_the_last_configuration_update_sets_the_calls_effort_and_format() -> None:
    schema = {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}
    request = {"model": "m", "reasoning": {"effort": "low"}, "text": {"format": {"type": "json_object"}}, "input": [
        {"type": "configuration_update", "reasoning": {"effort": "high"}},
        USER,
        {"type": "configuration_update", "reasoning": {"effort": "medium", "summary": "auto"}, "text": {"format": schema}},
        {"type": "configuration_update", "reasoning": {}},
    ]}  # fmt: skip
    chat = chat_of(request)
    assert [message["role"] for message in chat["messages"]] == ["user"]
    assert chat["reasoning_effort"] == "medium"
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "object"}},
    }
    plain = request | {
        "input": [USER, {"type": "configuration_update", "text": {"format": {"type": "text"}}}]
    }
    assert "response_format" not in chat_of(plain) and chat_of(plain)["reasoning_effort"] == "low"


@pytest.mark.parametrize(
    ("item", "param", "fragment"),
    [
        ({"type": "tool_search_call", "arguments": {"query": "x"}}, "input.1.type", "'tool_search_call' is not supported"),
        ({"type": "web_search_call", "action": {}}, "input.1.type", "not supported"),
        ({"type": "compaction", "encrypted_content": "x"}, "input.1.type", "not supported"),
        ({"type": "custom_tool_call_output", "call_id": "nope", "output": "x"}, "input.1.call_id",
         "which no earlier custom_tool_call has"),
        ({"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": 7}, "input.1.input", "string"),
        ({"type": "function_call", "call_id": "c", "name": "sleep", "namespace": "", "arguments": "{}"},
         "input.1.namespace", "non-empty"),
        ({"type": "configuration_update", "reasoning": "high"}, "input.1.reasoning", "must be an object"),
        ({"type": "configuration_update", "text": {"verbosity": "low"}}, "input.1.text", "needs a format"),
    ],
)  # fmt: skip
def test_an_item_that_cannot_be_served_is_refused_naming_it(
    item: dict[str, Any], param: str, fragment: str
) -> None:
    with pytest.raises(HttpError) as refused:
        chat_of({"model": "m", "input": [USER, item]})
    assert (refused.value.status, refused.value.param) == (400, param)
    assert fragment in refused.value.message
    body = json.loads(refused.value.body())["error"]
    assert body["type"] == "invalid_request_error" and body["param"] == param


def test_a_tool_choice_that_needs_a_call_needs_a_tool_the_policy_is_shown() -> None:
    search_only = {"type": "tool_search", "execution": "client", "parameters": {"type": "object"}}
    with pytest.raises(HttpError, match="no declared tool is one the policy is shown"):
        chat_of({"model": "m", "input": "hi", "tools": [search_only], "tool_choice": "required"})
    assert "tools" not in chat_of({"model": "m", "input": "hi", "tools": [search_only]})
    named = chat_of({"model": "m", "input": "hi", "tools": codex_request("gpt-5.5")["tools"][:4],
                     "tool_choice": {"type": "custom", "name": "apply_patch"}})  # fmt: skip
    assert named["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}

"""The tools of Codex CLI's real requests (0.171.0, captured) as the function tools the policy is shown, and the
way back from a call's name to the tool the agent declared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.services.ingest.endpoints.openai_responses.tool_call_items import (
    decode_custom_input_prefix,
)
from parity.services.ingest.endpoints.openai_responses.tool_catalog import (
    CUSTOM_PARAMETERS,
    DeclaredTool,
    decode_custom_input,
    encode_custom_input,
    tool_catalog,
)
from parity.services.ingest.openai_errors import HttpError

CODEX = Path(__file__).parent / "codex_requests"


def codex_request(model: str, web_search: bool = False) -> dict[str, Any]:
    """Codex's second request of a run (after one shell call); without its web_search tool unless asked for, as
    Codex sends it with `web_search = "disabled"`."""
    request = json.loads((CODEX / f"codex-0.171.0-{model}.json").read_text())
    if not web_search and "tools" in request:
        request["tools"] = [tool for tool in request["tools"] if tool["type"] != "web_search"]
    return request


def shown(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {tool["function"]["name"]: tool["function"] for tool in tool_catalog(request).chat_tools}


def test_a_free_form_custom_tool_is_shown_as_a_function_of_one_string_and_tool_search_is_not_shown() -> (
    None
):
    request = codex_request("gpt-5.5")
    tools = shown(request)
    declared = [tool.get("name") for tool in request["tools"] if tool["type"] != "tool_search"]
    assert list(tools) == declared and "tool_search" not in tools
    patch = next(tool for tool in request["tools"] if tool.get("name") == "apply_patch")
    assert patch["type"] == "custom" and patch["format"]["type"] == "grammar"
    # Shown as vLLM shows a free-form custom tool: its description, one string argument; the grammar is not shown.
    assert tools["apply_patch"] == {
        "name": "apply_patch",
        "description": patch["description"],
        "parameters": CUSTOM_PARAMETERS,
    }
    command = next(tool for tool in request["tools"] if tool.get("name") == "exec_command")
    assert tools["exec_command"] == {
        key: command[key] for key in ("name", "description", "parameters", "strict")
    }
    assert tool_catalog(request).called("apply_patch") == DeclaredTool("apply_patch", None, True)


def test_namespaced_tools_of_additional_tools_items_are_flattened_and_map_back() -> None:
    request = codex_request("gpt-6.2-sol")
    assert "tools" not in request and request["input"][0]["type"] == "additional_tools"
    catalog = tool_catalog(request)
    expected = [
        f"{namespace['name']}__{tool['name']}"
        for namespace in request["input"][0]["tools"]
        for tool in namespace["tools"]
    ]
    assert [tool["function"]["name"] for tool in catalog.chat_tools] == expected
    assert "functions__exec" in expected and "clock__sleep" in expected
    # `exec` is a custom tool inside the `functions` namespace; `sleep` a function inside `clock`.
    assert catalog.called("functions__exec") == DeclaredTool("exec", "functions", True)
    assert catalog.called("clock__sleep") == DeclaredTool("sleep", "clock", False)
    assert catalog.called("no_such_tool") == DeclaredTool("no_such_tool")


def test_additional_tools_come_after_the_requests_own_in_input_order() -> None:
    function = {"type": "function", "name": "first", "parameters": {"type": "object"}}
    request = {"tools": [function], "input": [
        {"type": "additional_tools", "role": "developer", "tools": [function | {"name": "second"}]},
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "additional_tools", "role": "developer", "tools": [{"type": "custom", "name": "third"}]},
    ]}  # fmt: skip
    assert list(shown(request)) == ["first", "second", "third"]


@pytest.mark.parametrize(
    ("request_body", "param", "fragment"),
    [
        (codex_request("gpt-5.5", web_search=True), "tools.9.type", 'web_search = "disabled"'),
        ({"input": [{"type": "additional_tools", "tools": [{"type": "file_search"}]}]}, "input.0.tools.0.type",
         "only function and custom tools"),
        ({"tools": [{"type": "namespace", "name": "a", "tools": [{"type": "web_search"}]}]}, "tools.0.tools.0.type",
         "not supported"),
        ({"tools": [{"type": "function", "name": "a__b"}, {"type": "namespace", "name": "a",
                                                           "tools": [{"type": "function", "name": "b"}]}]},
         "tools.1.tools.0.name", "two tools are shown to the policy as 'a__b'"),
        ({"tools": [{"type": "custom", "name": "x", "format": {"type": "regex"}}]}, "tools.0.format.type",
         "text or grammar"),
        ({"tools": [{"type": "namespace", "tools": []}]}, "tools.0.name", "needs a name"),
        ({"input": [{"type": "additional_tools", "tools": "all"}]}, "input.0.tools", "must be an array"),
    ],
)  # fmt: skip
def test_what_cannot_reach_the_policy_is_refused_naming_the_field(
    request_body: dict[str, Any], param: str, fragment: str
) -> None:
    with pytest.raises(HttpError) as refused:
        tool_catalog(request_body)
    assert refused.value.status == 400 and refused.value.param == param
    assert fragment in refused.value.message


def test_a_named_tool_choice_resolves_as_vllm_resolves_it() -> None:
    catalog = tool_catalog(codex_request("gpt-6.2-sol"))
    assert catalog.resolve_choice("clock__sleep") == "clock__sleep"
    assert catalog.resolve_choice("sleep") == "clock__sleep"  # the only namespace with a `sleep`
    with pytest.raises(HttpError, match="no declared tool"):
        catalog.resolve_choice("nothing")
    twice = {"tools": [{"type": "namespace", "name": name, "tools": [{"type": "function", "name": "run"}]}
                       for name in ("a", "b")]}  # fmt: skip
    with pytest.raises(HttpError, match="ambiguous"):
        tool_catalog(twice).resolve_choice("run")


@settings(deadline=None)
@given(st.text())
def test_a_custom_input_comes_back_whole_and_streams_as_growing_prefixes(payload: str) -> None:
    arguments = encode_custom_input(payload)
    assert decode_custom_input(arguments) == payload
    prefixes = [decode_custom_input_prefix(arguments[:cut]) for cut in range(len(arguments) + 1)]
    assert all(payload.startswith(prefix) for prefix in prefixes) and prefixes[-1] == payload


def test_arguments_that_are_not_the_shims_pass_as_they_are() -> None:
    for arguments in ("*** Begin Patch", '{"patch": "x"}', "[1]", '{"input": 3}'):
        assert decode_custom_input(arguments) == arguments

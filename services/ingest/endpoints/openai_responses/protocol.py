"""An OpenAI Responses request as the chat request that renders the same prompt vLLM's own /v1/responses does.

vLLM renders a Responses request by turning its input into chat messages and applying
the chat template; ingest builds the same messages (tests compare the rendered
tokens): `instructions` lead as a system message (never carried over from a previous
response); a string input is one user message; input items become messages
(input_items.py); the tools become chat function tools (tool_catalog.py); the
settings a `configuration_update` item leaves in effect replace the request's
(configuration_updates.py). A previous response's conversation, rebuilt by chain.py,
comes before the new input. What the policy cannot serve (images, files, hosted
tools) or what does not hold together (a tool output for no call) is refused with a
400 naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from parity.services.ingest import openai_errors
from parity.services.ingest.endpoints.openai_responses.configuration_updates import (
    settings_in_effect,
)
from parity.services.ingest.endpoints.openai_responses.input_items import item_messages
from parity.services.ingest.endpoints.openai_responses.tool_catalog import ToolCatalog
from parity.services.ingest.endpoints.request_start import copy_sampling

TOOL_CHOICES = ("auto", "none", "required")
# A named choice: of a function (its flat `<namespace>__<name>` or a local name one namespace has) or a custom tool.
NAMED_CHOICES = ("function", "custom")


def bad(message: str, param: str) -> openai_errors.HttpError:
    return openai_errors.bad_request(message, param)


def check_request(request: Mapping[str, Any]) -> None:
    """The fields every Responses request needs besides its model (request_start checks that)."""
    if not isinstance(request.get("input"), str | list):
        raise bad("input is required: a string or an array of input items", "input")
    previous = request.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise bad("previous_response_id must be a non-empty string", "previous_response_id")
    for name in ("store", "stream", "parallel_tool_calls", "background"):
        if request.get(name) is not None and not isinstance(request[name], bool):
            raise bad(f"{name} must be a boolean", name)
    if request.get("background"):
        raise bad(
            "background responses are not supported: ingest answers while the agent waits",
            "background",
        )
    tool_choice_of(request)


def declares_tools(request: Mapping[str, Any]) -> bool:
    """Whether the request has tools: its own, or those of an `additional_tools` input item."""
    items = request.get("input")
    return bool(request.get("tools")) or any(
        isinstance(item, Mapping) and item.get("type") == "additional_tools" and item.get("tools")
        for item in (items if isinstance(items, list) else ())
    )


def tool_choice_of(request: Mapping[str, Any]) -> Any:
    """The tool choice in effect: without tools, "auto" means "none", and anything that names a tool is refused."""
    choice = request.get("tool_choice", "auto")
    if declares_tools(request):
        return choice
    if choice in ("auto", "none", None):
        return "none"
    raise bad(
        "tool_choice names a tool, or requires one, but the request declares no tools",
        "tool_choice",
    )


def input_messages(
    request: Mapping[str, Any], history: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The chat messages of the request: its instructions, the previous conversation, its input."""
    messages: list[dict[str, Any]] = []
    instructions = request.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad("instructions must be a string", "instructions")
    if instructions:
        messages.append({"role": "system", "content": instructions})
    messages += history
    items = request["input"]
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    return messages + item_messages(items, messages)


# What vLLM's own /v1/responses samples with besides temperature and top_p, under the names its chat endpoint
# takes too: carried as given, so a request gives the same tokens through ingest as from vLLM directly (vLLM
# checks the values, and its refusal reaches the agent).
PASSED_THROUGH = (
    "seed", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "stop", "stop_token_ids",
    "ignore_eos", "logit_bias", "skip_special_tokens", "include_stop_str_in_output", "structured_outputs",
    "chat_template_kwargs", "vllm_xargs", "cache_salt", "priority",
)  # fmt: skip


def to_chat_request(
    request: Mapping[str, Any],
    messages: list[dict[str, Any]],
    served_model: str,
    tools: ToolCatalog,
) -> dict[str, Any]:
    """The chat request; `tools`: the request's tools (tool_catalog.py)."""
    chat: dict[str, Any] = {"model": served_model, "messages": messages}
    max_output = request.get("max_output_tokens")
    if max_output is not None:
        if isinstance(max_output, bool) or not isinstance(max_output, int) or max_output < 1:
            raise bad("max_output_tokens must be a positive integer", "max_output_tokens")
        chat["max_tokens"] = max_output
    copy_sampling(request, chat)
    for name in PASSED_THROUGH:
        if request.get(name) is not None:
            chat[name] = request[name]
    if request.get("parallel_tool_calls") is not None:
        chat["parallel_tool_calls"] = request["parallel_tool_calls"]
    if tools.chat_tools:
        chat["tools"] = tools.chat_tools
        _tool_choice(request.get("tool_choice"), chat, tools)
    elif tool_choice_of(request) not in ("auto", "none"):
        raise bad("tool_choice requires a tool call, but no declared tool is one the policy is shown",
                  "tool_choice")  # fmt: skip
    settings = settings_in_effect(request["input"])
    text = request.get("text")
    _text_format(text.get("format") if isinstance(text, Mapping) else None, chat)
    if settings.text_format is not None:
        chat.pop("response_format", None)
        _text_format(settings.text_format, chat)
    reasoning = request.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, Mapping) else None
    if settings.effort is not None:
        effort = settings.effort
    if effort is not None:
        chat["reasoning_effort"] = effort
    if request.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _tool_choice(choice: Any, chat: dict[str, Any], tools: ToolCatalog) -> None:
    if choice is None:
        return
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise bad(
                f"tool_choice must be one of {', '.join(TOOL_CHOICES)} or a function", "tool_choice"
            )
        chat["tool_choice"] = choice
        return
    if (
        not isinstance(choice, Mapping)
        or choice.get("type") not in NAMED_CHOICES
        or not isinstance(choice.get("name"), str)
    ):
        raise bad(
            'tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}',
            "tool_choice",
        )
    chat["tool_choice"] = {
        "type": "function",
        "function": {"name": tools.resolve_choice(choice["name"])},
    }


def _text_format(output_format: Any, chat: dict[str, Any]) -> None:
    if not isinstance(output_format, Mapping):
        return
    if output_format.get("type") == "json_schema":
        schema = {
            key: output_format[key]
            for key in ("name", "schema", "strict", "description")
            if key in output_format
        }
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif output_format.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}

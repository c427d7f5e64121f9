"""An Anthropic Messages request as the chat request vLLM's own /v1/messages makes of it, checked as it goes.

vLLM serves /v1/messages by converting the request into a chat completion request
and running that; ingest makes the same conversion, so the prompt the policy sees
through ingest is the prompt vLLM's own endpoint renders (tests compare the two
token for token). Ingest then asks for the token ids and logprobs the conversion
leaves out, which is why it converts rather than forwarding to vLLM's endpoint.

What the conversion keeps of vLLM's choices: the system prompt (a string or text
blocks, Claude Code's per-request billing header dropped) leads as one system
message; a user message's tool results become `tool` messages placed before it; an
assistant's thinking becomes its `reasoning`; when the chat template refuses system
messages after the first turn, inline system messages are merged into the leading
one. Anything the policy cannot serve (images, documents) or that does not hold
together (a tool result with no tool use before it) is refused with a 400 that names
the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from parity.services.ingest import openai_errors
from parity.services.ingest.endpoints.request_start import copy_sampling

# Claude Code starts its system prompt with a per-request hash that would defeat prefix caching.
BILLING_HEADER = "x-anthropic-billing-header"
ROLES = ("user", "assistant", "system")
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
THINKING_TYPES = ("enabled", "disabled", "adaptive")
EFFORTS = ("low", "medium", "high", "xhigh", "max")
KNOWN_BLOCKS = ("text", "thinking", "redacted_thinking", "tool_use", "tool_result")
UNSUPPORTED_BLOCKS = {
    "image": "image blocks are not supported: the policy behind ingest is served as a text model",
    "document": "document blocks are not supported: send their text as a text block",
    "search_result": "search_result blocks are not supported",
    "server_tool_use": "server tools are not supported: declare them as client tools",
    "web_search_tool_result": "server tools are not supported: declare them as client tools",
    "container_upload": "container uploads are not supported",
    "tool_reference": "tool_reference blocks are not supported",
    "tool_addition": "tool_addition blocks are not supported: declare every tool in `tools`",
    "tool_removal": "tool_removal blocks are not supported: declare every tool in `tools`",
}


def bad(message: str, param: str) -> openai_errors.HttpError:
    return openai_errors.bad_request(message, param)


def to_chat_request(
    request: Mapping[str, Any], *, merge_inline_system: bool, counting: bool = False
) -> dict[str, Any]:
    """The chat completion body for `request`. `counting`: a count_tokens request (no sampling fields)."""
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model is required and must be a non-empty string", "model")
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages is required and must be a non-empty array", "messages")
    chat_messages: list[dict[str, Any]] = []
    system = [*_system_parts(request.get("system"), "system")]
    if merge_inline_system:
        for index, message in enumerate(messages):
            if isinstance(message, Mapping) and message.get("role") == "system":
                system += _system_parts(message.get("content"), f"messages.{index}.content")
    if system:
        chat_messages.append({"role": "system", "content": "".join(system)})
    tool_use_ids: set[str] = set()
    for index, message in enumerate(messages):
        _convert_message(
            message, f"messages.{index}", chat_messages, tool_use_ids, merge_inline_system
        )
    chat: dict[str, Any] = {"model": model, "messages": chat_messages}
    if not counting:
        _sampling(request, chat)
    _output_config(request.get("output_config"), chat)
    _thinking(request.get("thinking"), request.get("max_tokens"), chat)
    _tool_choice(request.get("tool_choice"), chat)
    _tools(request.get("tools"), chat)
    return chat


def _sampling(request: Mapping[str, Any], chat: dict[str, Any]) -> None:
    max_tokens = request.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise bad("max_tokens is required and must be a positive integer", "max_tokens")
    chat["max_tokens"] = chat["max_completion_tokens"] = max_tokens
    stop = request.get("stop_sequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise bad("stop_sequences must be an array of strings", "stop_sequences")
        chat["stop"] = stop
    copy_sampling(request, chat)
    top_k = request.get("top_k")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise bad("top_k must be a non-negative integer", "top_k")
        chat["top_k"] = top_k
    stream = request.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad("stream must be a boolean", "stream")
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}


def _system_parts(system: Any, param: str) -> list[str]:
    if system is None:
        return []
    if isinstance(system, str):
        return [] if system.startswith(BILLING_HEADER) else [system]
    if not isinstance(system, list):
        raise bad("must be a string or an array of text blocks", param)
    parts = []
    for index, block in enumerate(system):
        if (
            not isinstance(block, Mapping)
            or block.get("type") != "text"
            or not isinstance(block.get("text"), str)
        ):
            raise bad("system blocks must be text blocks with a string `text`", f"{param}.{index}")
        if block["text"] and not block["text"].startswith(BILLING_HEADER):
            parts.append(block["text"])
    return parts


def _convert_message(
    message: Any,
    param: str,
    chat_messages: list[dict[str, Any]],
    tool_use_ids: set[str],
    merge_inline_system: bool,
) -> None:
    if not isinstance(message, Mapping):
        raise bad("a message must be an object with role and content", param)
    role, content = message.get("role"), message.get("content")
    if role not in ROLES:
        raise bad(f"role must be one of {', '.join(ROLES)}, got {role!r}", f"{param}.role")
    if not isinstance(content, str | list):
        raise bad("content must be a string or an array of content blocks", f"{param}.content")
    if role == "system":
        if not merge_inline_system:
            text = "".join(_system_parts(content, f"{param}.content"))
            if text:
                chat_messages.append({"role": "system", "content": text})
        return
    converted: dict[str, Any] = {"role": role}
    if isinstance(content, str):
        converted["content"] = content
    else:
        _convert_blocks(content, role, f"{param}.content", converted, chat_messages, tool_use_ids)
    # A user turn that held only tool results has become `tool` messages; nothing of it is left to send.
    if not (role == "user" and "content" not in converted):
        chat_messages.append(converted)


def _convert_blocks(
    blocks: list[Any], role: str, param: str, converted: dict[str, Any], chat_messages: list[dict[str, Any]],
    tool_use_ids: set[str],
) -> None:  # fmt: skip
    parts: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for index, block in enumerate(blocks):
        where = f"{param}.{index}"
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind in UNSUPPORTED_BLOCKS:
            raise bad(UNSUPPORTED_BLOCKS[str(kind)], where)
        if kind not in KNOWN_BLOCKS:
            raise bad(
                f"unknown content block type {kind!r}; expected one of {', '.join(KNOWN_BLOCKS)}",
                f"{where}.type",
            )
        if kind == "text":
            text = _string(block, "text", where)
            if text:
                parts.append({"type": "text", "text": text})
        elif kind == "thinking":
            reasoning.append(_string(block, "thinking", where))
        elif kind == "tool_use":
            if role != "assistant":
                raise bad("tool_use blocks belong to assistant messages", where)
            tool_calls.append(_tool_call(block, where, tool_use_ids))
        elif kind == "tool_result":
            _tool_result(block, role, where, parts, chat_messages, tool_use_ids)
    if reasoning:
        converted["reasoning"] = "".join(reasoning)
    if tool_calls:
        converted["tool_calls"] = tool_calls
    if parts:
        converted["content"] = parts[0]["text"] if len(parts) == 1 else parts


def _tool_call(block: Mapping[str, Any], where: str, tool_use_ids: set[str]) -> dict[str, Any]:
    call_id, name = _string(block, "id", where), _string(block, "name", where)
    if not call_id or not name:
        raise bad("a tool_use block needs a non-empty id and name", where)
    arguments = block.get("input", {})
    if not isinstance(arguments, Mapping):
        raise bad("input must be an object", f"{where}.input")
    tool_use_ids.add(call_id)
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments or {})},
    }


def _tool_result(
    block: Mapping[str, Any], role: str, where: str, parts: list[dict[str, Any]], chat_messages: list[dict[str, Any]],
    tool_use_ids: set[str],
) -> None:  # fmt: skip
    content = block.get("content")
    if role != "user":
        # As vLLM does: a tool result outside a user turn is text of that turn.
        parts.append({"type": "text", "text": f"Tool result: {content if content else ''}"})
        return
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str) or tool_use_id not in tool_use_ids:
        raise bad(
            f"tool_result refers to tool_use_id {tool_use_id!r}, which no earlier tool_use block has",
            f"{where}.tool_use_id",
        )
    if content is None or isinstance(content, str):
        text = content or ""
    elif isinstance(content, list):
        texts = []
        for index, item in enumerate(content):
            kind = item.get("type") if isinstance(item, Mapping) else None
            if kind == "text":
                texts.append(_string(item, "text", f"{where}.content.{index}"))
            elif kind in UNSUPPORTED_BLOCKS:
                raise bad(UNSUPPORTED_BLOCKS[str(kind)], f"{where}.content.{index}")
            else:
                raise bad(
                    f"a tool result holds text blocks, got {kind!r}",
                    f"{where}.content.{index}.type",
                )
        text = "\n".join(texts)
    else:
        raise bad("content must be a string or an array of text blocks", f"{where}.content")
    chat_messages.append({"role": "tool", "tool_call_id": tool_use_id, "content": text})


def _output_config(config: Any, chat: dict[str, Any]) -> None:
    if config is None:
        return
    if not isinstance(config, Mapping):
        raise bad("output_config must be an object", "output_config")
    output_format = config.get("format")
    if isinstance(output_format, Mapping) and output_format.get("schema") is not None:
        kind = output_format.get("type", "json_schema")
        chat["response_format"] = {
            "type": kind,
            "json_schema": {"schema": output_format["schema"], "name": kind},
        }
    effort = config.get("effort")
    if effort is not None:
        if effort not in EFFORTS:
            raise bad(f"effort must be one of {', '.join(EFFORTS)}", "output_config.effort")
        chat["reasoning_effort"] = effort


def _thinking(thinking: Any, max_tokens: Any, chat: dict[str, Any]) -> None:
    if thinking is None:
        return
    if not isinstance(thinking, Mapping) or thinking.get("type") not in THINKING_TYPES:
        raise bad(f"thinking.type must be one of {', '.join(THINKING_TYPES)}", "thinking.type")
    if thinking["type"] == "disabled":
        chat["reasoning_effort"] = "none"
    elif thinking["type"] == "enabled":
        budget = thinking.get("budget_tokens")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1024:
            raise bad("budget_tokens must be an integer of at least 1024", "thinking.budget_tokens")
        if isinstance(max_tokens, int) and budget >= max_tokens:
            raise bad(
                "thinking.budget_tokens must be less than max_tokens", "thinking.budget_tokens"
            )
        chat["thinking_token_budget"] = budget


def _tool_choice(choice: Any, chat: dict[str, Any]) -> None:
    if choice is None:
        return
    if not isinstance(choice, Mapping) or choice.get("type") not in (*TOOL_CHOICES, "tool"):
        raise bad("tool_choice.type must be one of auto, any, tool, none", "tool_choice.type")
    chat["parallel_tool_calls"] = not choice.get("disable_parallel_tool_use")
    if choice["type"] == "tool":
        if not isinstance(choice.get("name"), str) or not choice["name"]:
            raise bad("tool_choice.name is required when type is 'tool'", "tool_choice.name")
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        chat["tool_choice"] = TOOL_CHOICES[choice["type"]]


def _tools(tools: Any, chat: dict[str, Any]) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise bad("tools must be an array", "tools")
    converted = []
    for index, tool in enumerate(tools):
        where = f"tools.{index}"
        if (
            not isinstance(tool, Mapping)
            or not isinstance(tool.get("name"), str)
            or not tool["name"]
        ):
            raise bad("a tool needs a non-empty name", f"{where}.name")
        if tool.get("type") not in (None, "custom"):
            raise bad(
                f"server tools ({tool['type']}) are not supported: declare them as client tools",
                f"{where}.type",
            )
        schema = tool.get("input_schema")
        if not isinstance(schema, Mapping):
            raise bad("input_schema is required and must be an object", f"{where}.input_schema")
        # As vLLM's own translation does: the schema's own key order (the template renders it), "type" last if absent.
        parameters = dict(schema) | ({} if "type" in schema else {"type": "object"})
        function = {
            "name": tool["name"],
            "description": tool.get("description"),
            "parameters": parameters,
        }
        function |= {
            key: tool[key] for key in ("strict", "defer_loading") if tool.get(key) is not None
        }
        converted.append({"type": "function", "function": function})
    if not converted:
        # Anthropic's API takes `tools: []` (Claude Code with `--tools ''` sends it) and vLLM's own /v1/messages
        # renders it as no tools; its chat API refuses an empty array, so the chat request names none.
        if chat.get("tool_choice") in ("auto", "none"):
            del chat["tool_choice"]
        return
    chat["tools"] = converted
    chat.setdefault("tool_choice", "auto")


def _string(block: Mapping[str, Any], name: str, where: str) -> str:
    value = block.get(name, "")
    if not isinstance(value, str):
        raise bad(f"{name} must be a string", f"{where}.{name}")
    return value

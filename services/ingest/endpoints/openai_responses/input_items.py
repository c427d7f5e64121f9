"""A Responses request's input items as the chat messages vLLM's /v1/responses builds from them.

As vLLM's `construct_chat_messages_with_tool_call` does: a `function_call` (its
namespace flattened to `<namespace>__<name>`) or a `custom_tool_call` (its input as the
shim's `{"input": ...}` arguments) joins the assistant message before it as a tool
call; its `function_call_output` or `custom_tool_call_output` becomes a `tool` message;
a `reasoning` item becomes the assistant's reasoning; a message becomes a message.
`additional_tools` and `configuration_update` items are not prompt text: they declare
tools (tool_catalog.py) and change settings (configuration_updates.py). Any other item
(a hosted tool's call, a tool search, a compaction) is refused with a 400 naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from parity.services.ingest import openai_errors
from parity.services.ingest.endpoints.openai_responses.configuration_updates import UPDATE
from parity.services.ingest.endpoints.openai_responses.tool_catalog import (
    encode_custom_input,
    flat_name,
)

TEXT_PARTS = ("input_text", "output_text", "text")
UNSUPPORTED_PARTS = {
    "input_image": "image inputs are not supported: the policy behind ingest is served as a text model",
    "input_file": "file inputs are not supported: send their text as input_text",
    "input_audio": "audio inputs are not supported",
}
ROLES = ("user", "assistant", "system", "developer")
CALLS = ("function_call", "custom_tool_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")
NOT_PROMPT_TEXT = ("additional_tools", UPDATE)
SERVED = "message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, reasoning, " \
         "additional_tools or configuration_update"  # fmt: skip


def bad(message: str, param: str) -> openai_errors.HttpError:
    return openai_errors.bad_request(message, param)


def item_messages(items: list[Any], earlier: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of `items`, which continue the conversation `earlier` (whose tool calls they may answer)."""
    call_ids = {call["id"] for message in earlier for call in message.get("tool_calls") or ()}
    converted: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        message = _convert_item(
            item, f"input.{index}", converted[-1] if converted else None, call_ids
        )
        if message is not None:
            converted.append(message)
    return converted


def _convert_item(
    item: Any, where: str, previous: dict[str, Any] | None, call_ids: set[str]
) -> dict[str, Any] | None:
    """The message for one input item; None when it joined `previous` (an assistant turn's parts) or is not prompt
    text."""
    if not isinstance(item, Mapping):
        raise bad("an input item must be an object", where)
    kind = item.get("type", "message")
    assistant = previous if previous is not None and previous.get("role") == "assistant" else None
    if kind in NOT_PROMPT_TEXT:
        return None
    if kind in CALLS:
        call = _tool_call(item, kind, where)
        call_ids.add(call["id"])
        if assistant is not None:
            assistant.setdefault("tool_calls", []).append(call)
            return None
        return {"role": "assistant", "tool_calls": [call]}
    if kind in OUTPUTS:
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str) or call_id not in call_ids:
            raise bad(f"{kind} refers to call_id {call_id!r}, which no earlier {kind.removesuffix('_output')} has",
                      f"{where}.call_id")  # fmt: skip
        if not isinstance(output, str):
            output = json.dumps(output)
        return {"role": "tool", "content": output, "tool_call_id": call_id}
    if kind == "reasoning":
        if item.get("encrypted_content"):
            raise bad("encrypted reasoning is not supported", f"{where}.encrypted_content")
        parts = item.get("content") or item.get("summary") or []
        reasoning = parts[0].get("text", "") if parts and isinstance(parts[0], Mapping) else ""
        if assistant is not None and assistant.get("reasoning") is None:
            assistant["reasoning"] = reasoning
            return None
        return {"role": "assistant", "reasoning": reasoning}
    if kind != "message":
        raise bad(f"input item type {kind!r} is not supported; use {SERVED}", f"{where}.type")
    role = item.get("role")
    if role not in ROLES:
        raise bad(f"role must be one of {', '.join(ROLES)}, got {role!r}", f"{where}.role")
    text = _message_text(item.get("content"), f"{where}.content")
    if role == "assistant":
        if assistant is not None and assistant.get("content") is None:
            assistant["content"] = text
            return None
        return {"role": "assistant", "content": text}
    return {"role": role, "content": text}


def _tool_call(item: Mapping[str, Any], kind: str, where: str) -> dict[str, Any]:
    """A function_call or custom_tool_call item as the chat tool call the policy made."""
    name, call_id, namespace = item.get("name"), item.get("call_id"), item.get("namespace")
    if not isinstance(name, str) or not name or not isinstance(call_id, str) or not call_id:
        raise bad(f"a {kind} item needs a name and a call_id", where)
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        raise bad("namespace must be a non-empty string", f"{where}.namespace")
    if kind == "custom_tool_call":
        payload = item.get("input", "")
        if not isinstance(payload, str):
            raise bad("a custom_tool_call's input must be a string", f"{where}.input")
        arguments = encode_custom_input(payload)
    else:
        arguments = item.get("arguments", "")
        if not isinstance(arguments, str):
            raise bad("arguments must be a JSON string", f"{where}.arguments")
    function = {"name": flat_name(namespace, name), "arguments": arguments}
    return {"id": call_id, "type": "function", "function": function}


def _message_text(content: Any, where: str) -> str | list[dict[str, str]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad("content must be a string or an array of content parts", where)
    parts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in UNSUPPORTED_PARTS:
            raise bad(UNSUPPORTED_PARTS[str(kind)], f"{where}.{index}")
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise bad(
                f"unknown content part type {kind!r}; expected input_text or output_text",
                f"{where}.{index}.type",
            )
        parts.append({"type": "text", "text": part["text"]})
    return parts[0]["text"] if len(parts) == 1 else parts

"""An OpenAI Responses request as the chat request that renders the same prompt vLLM's own /v1/responses does.

vLLM renders a Responses request by turning its input into chat messages and applying
the chat template; ingest builds the same messages (tests compare the rendered
tokens): `instructions` lead as a system message (never carried over from a previous
response); a string input is one user message; input items become messages (a
`function_call` joins the assistant message before it as a tool call, its
`function_call_output` becomes a `tool` message, a `reasoning` item becomes the
assistant's reasoning). A previous response's conversation, rebuilt by chain.py,
comes before the new input. What the policy cannot serve (images, files, hosted
tools) or what does not hold together (a tool output for no call) is refused with a
400 naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from parity.services.ingest import openai_errors
from parity.services.ingest.endpoints.request_start import copy_sampling

TEXT_PARTS = ("input_text", "output_text", "text")
UNSUPPORTED_PARTS = {
    "input_image": "image inputs are not supported: the policy behind ingest is served as a text model",
    "input_file": "file inputs are not supported: send their text as input_text",
    "input_audio": "audio inputs are not supported",
}
ROLES = ("user", "assistant", "system", "developer")
TOOL_CHOICES = ("auto", "none", "required")


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


def tool_choice_of(request: Mapping[str, Any]) -> Any:
    """The tool choice in effect: without tools, "auto" means "none", and anything that names a tool is refused."""
    choice = request.get("tool_choice", "auto")
    if request.get("tools"):
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
    call_ids = {call["id"] for message in messages for call in message.get("tool_calls") or ()}
    converted: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        message = _convert_item(
            item, f"input.{index}", converted[-1] if converted else None, call_ids
        )
        if message is not None:
            converted.append(message)
    return messages + converted


# What vLLM's own /v1/responses samples with besides temperature and top_p, under the names its chat endpoint
# takes too: carried as given, so a request gives the same tokens through ingest as from vLLM directly (vLLM
# checks the values, and its refusal reaches the agent).
PASSED_THROUGH = (
    "seed", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "stop", "stop_token_ids",
    "ignore_eos", "logit_bias", "skip_special_tokens", "include_stop_str_in_output", "structured_outputs",
    "chat_template_kwargs", "vllm_xargs", "cache_salt", "priority",
)  # fmt: skip


def to_chat_request(
    request: Mapping[str, Any], messages: list[dict[str, Any]], served_model: str
) -> dict[str, Any]:
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
    _tools(request.get("tools"), chat)
    if request.get("tools"):
        _tool_choice(request.get("tool_choice"), chat)
    _text_format(request.get("text"), chat)
    reasoning = request.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    if request.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _convert_item(
    item: Any, where: str, previous: dict[str, Any] | None, call_ids: set[str]
) -> dict[str, Any] | None:
    """The message for one input item; None when it joined `previous` (an assistant turn's parts)."""
    if not isinstance(item, Mapping):
        raise bad("an input item must be an object", where)
    kind = item.get("type", "message")
    assistant = previous if previous is not None and previous.get("role") == "assistant" else None
    if kind == "function_call":
        name, call_id, arguments = item.get("name"), item.get("call_id"), item.get("arguments", "")
        if not isinstance(name, str) or not name or not isinstance(call_id, str) or not call_id:
            raise bad("a function_call item needs a name and a call_id", where)
        if not isinstance(arguments, str):
            raise bad("arguments must be a JSON string", f"{where}.arguments")
        call_ids.add(call_id)
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        if assistant is not None:
            assistant.setdefault("tool_calls", []).append(call)
            return None
        return {"role": "assistant", "tool_calls": [call]}
    if kind == "function_call_output":
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str) or call_id not in call_ids:
            raise bad(f"function_call_output refers to call_id {call_id!r}, which no earlier function_call has",
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
        raise bad(f"input item type {kind!r} is not supported; use message, function_call, function_call_output "
                  "or reasoning", f"{where}.type")  # fmt: skip
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


def _tools(tools: Any, chat: dict[str, Any]) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise bad("tools must be an array", "tools")
    converted = []
    for index, tool in enumerate(tools):
        where = f"tools.{index}"
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, Mapping) else None
            raise bad(
                f"tool type {kind!r} is not supported: only function tools reach the policy",
                f"{where}.type",
            )
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise bad("a function tool needs a name", f"{where}.name")
        function = {
            key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool
        }
        converted.append({"type": "function", "function": function})
    if converted:
        chat["tools"] = converted


def _tool_choice(choice: Any, chat: dict[str, Any]) -> None:
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
        or choice.get("type") != "function"
        or not isinstance(choice.get("name"), str)
    ):
        raise bad(
            'tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}',
            "tool_choice",
        )
    chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}


def _text_format(text: Any, chat: dict[str, Any]) -> None:
    if not isinstance(text, Mapping) or not isinstance(text.get("format"), Mapping):
        return
    output_format = text["format"]
    if output_format.get("type") == "json_schema":
        schema = {
            key: output_format[key]
            for key in ("name", "schema", "strict", "description")
            if key in output_format
        }
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif output_format.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}

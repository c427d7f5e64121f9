"""vLLM's chat answer as a Responses object, whole or as the Responses event stream, as vLLM's /v1/responses
builds them.

Output items come in the order reasoning, message, function calls. Streamed:
`response.created` and `response.in_progress`, then for each item
`response.output_item.added`, its content part or arguments as they are generated,
and its `.done` events, then `response.completed` with the whole response; every
event carries its sequence number.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from parity.services.ingest.endpoints.openai_responses.protocol import tool_choice_of
from parity.services.ingest.endpoints.openai_responses.tool_call_items import (
    StreamedCall,
    call_item,
)
from parity.services.ingest.endpoints.openai_responses.tool_catalog import ToolCatalog

# What a response echoes of its request when the request did not say.
DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "tools": [], "parallel_tool_calls": True,
            "truncation": "disabled", "service_tier": "auto", "presence_penalty": 0.0, "frequency_penalty": 0.0}  # fmt: skip
# The fields vLLM's /v1/responses gives each kind of tool it echoes, unset ones as null; a namespace's own fields
# are all required, and its tools are echoed so too.
ECHOED_TOOL_FIELDS = {
    "function": ("name", "parameters", "strict", "type", "allowed_callers", "async", "defer_loading", "description",
                 "output_schema"),
    "custom": ("name", "type", "allowed_callers", "async", "defer_loading", "description", "format"),
    "tool_search": ("type", "description", "execution", "parameters"),
}  # fmt: skip


def response_id(call_id: str) -> str:
    return f"resp_{call_id}"


def call_id_of(response: str) -> str | None:
    return response.removeprefix("resp_") if response.startswith("resp_") else None


@dataclass
class ResponseShell:
    """What a response says of its request, the same before, during and after generation."""

    id: str
    model: str
    request: Mapping[str, Any]
    max_output_tokens: int | None
    # The request's tools, which name what a call comes back as.
    tools: ToolCatalog = field(default_factory=ToolCatalog)
    created_at: int = field(default_factory=lambda: int(time.time()))

    def _echoed_choice(self) -> Any:
        """The tool choice as vLLM echoes it: a named one under the flat name the policy was shown."""
        choice = tool_choice_of(self.request)
        if (
            isinstance(choice, Mapping)
            and isinstance(choice.get("name"), str)
            and self.tools.declared
        ):
            return dict(choice) | {"name": self.tools.resolve_choice(choice["name"])}
        return choice

    def render(
        self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None
    ) -> dict[str, Any]:
        request = self.request
        return {
            "id": self.id, "created_at": self.created_at,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": request.get("instructions"), "metadata": request.get("metadata"), "model": self.model,
            "object": "response", "output": output,
            "parallel_tool_calls": _given(request, "parallel_tool_calls"), "temperature": _given(request, "temperature"),
            "tool_choice": self._echoed_choice(), "tools": _given(request, "tools"),
            "top_p": _given(request, "top_p"), "background": False, "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": request.get("max_tool_calls"), "previous_response_id": request.get("previous_response_id"),
            "prompt": None, "reasoning": request.get("reasoning"), "service_tier": _given(request, "service_tier"),
            "status": status, "text": echoed_text(request.get("text")), "top_logprobs": None,
            "truncation": _given(request, "truncation"), "usage": usage, "user": request.get("user"),
            # vLLM's own additions: the penalties it sampled with, and what it only fills for features ingest
            # does not use (disaggregated prefill's transfer parameters, enable_response_messages).
            "presence_penalty": _given(request, "presence_penalty"), "frequency_penalty": _given(request, "frequency_penalty"),
            "kv_transfer_params": None, "ec_transfer_params": None, "input_messages": None, "output_messages": None,
        }  # fmt: skip


def _given(request: Mapping[str, Any], name: str) -> Any:
    value = request.get(name)
    if name == "tools" and value:
        return [_echoed_tool(tool) for tool in value]
    if value is None:
        return DEFAULTS[name]
    # vLLM's response object types these as floats, so a request's 0 is echoed 0.0, as vLLM spells it.
    if isinstance(DEFAULTS[name], float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _echoed_tool(tool: Any) -> Any:
    if not isinstance(tool, Mapping):
        return tool
    if tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
        return dict(tool) | {"tools": [_echoed_tool(member) for member in tool["tools"]]}
    fields = ECHOED_TOOL_FIELDS.get(str(tool.get("type")), ())
    return {name: tool.get(name) for name in fields} | dict(tool)


def echoed_text(text: Any) -> Any:
    """The request's text settings as vLLM echoes them: its format with every field of its type, unset ones null."""
    if not isinstance(text, Mapping):
        return text
    output_format = text.get("format")
    if isinstance(output_format, Mapping) and output_format.get("type") == "json_schema":
        output_format = {"description": None, "strict": None} | dict(output_format)
    return {"format": output_format, "verbosity": text.get("verbosity")} | {
        key: value for key, value in text.items() if key not in ("format", "verbosity")
    }


def usage(chat_usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not chat_usage:
        return None
    prompt, completion = (
        chat_usage.get("prompt_tokens") or 0,
        chat_usage.get("completion_tokens") or 0,
    )
    details = chat_usage.get("prompt_tokens_details") or {}
    cached, written = details.get("cached_tokens") or 0, details.get("created_cache_tokens") or 0
    # One generation, no built-in tools: vLLM's per-turn lists stay empty for such a request, as here.
    return {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written, "input_tokens_per_turn": [],
                                     "cached_tokens_per_turn": []},
            "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0, "output_tokens_per_turn": [],
                                      "tool_output_tokens_per_turn": []}}  # fmt: skip


def status_of(finish_reason: str | None) -> str:
    return "incomplete" if finish_reason == "length" else "completed"


def output_items(message: Mapping[str, Any], tools: ToolCatalog) -> list[dict[str, Any]]:
    """The output of one chat answer's message; `tools` say what each call comes back as."""
    items: list[dict[str, Any]] = []
    if message.get("reasoning"):
        items.append(_reasoning_item(f"rs_{uuid.uuid4().hex}", message["reasoning"], None))
    if message.get("content"):
        items.append(_message_item(f"msg_{uuid.uuid4().hex}", message["content"], "completed"))
    items += [call_item(tools, call) for call in message.get("tool_calls") or ()]
    return items


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = (
        [{"annotations": [], "text": text, "type": "output_text", "logprobs": None}] if text else []
    )
    return {
        "id": item_id,
        "content": content,
        "role": "assistant",
        "status": status,
        "type": "message",
        "phase": None,
    }


def _reasoning_item(item_id: str, text: str, status: str | None) -> dict[str, Any]:
    return {"id": item_id, "summary": [], "type": "reasoning", "content": [{"text": text, "type": "reasoning_text"}],
            "encrypted_content": None, "status": status}  # fmt: skip


def to_response(shell: ResponseShell, chat: Mapping[str, Any]) -> dict[str, Any]:
    choice = chat["choices"][0]
    return shell.render(status_of(choice.get("finish_reason")), output_items(choice.get("message") or {}, shell.tools),
                        usage(chat.get("usage")))  # fmt: skip


def event(data: dict[str, Any]) -> bytes:
    return b"event: " + data["type"].encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class ResponseStream:
    """The Responses events of a chat stream, fed chunk by chunk."""

    def __init__(self, shell: ResponseShell) -> None:
        self.shell = shell
        self.sequence = 0
        self.state: str | None = None
        self.item_id = ""
        self.output_index = 0
        self.text = ""
        self.call: StreamedCall | None = None
        self.output: list[dict[str, Any]] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def start(self) -> list[bytes]:
        response = self.shell.render("in_progress", [], None)
        return [self._event({"type": "response.created", "response": response}),
                self._event({"type": "response.in_progress", "response": response})]  # fmt: skip

    def feed(self, chunk: Mapping[str, Any]) -> list[bytes]:
        if chunk.get("usage"):
            self.usage = usage(chunk["usage"])
        choices = chunk.get("choices") or []
        if not choices:
            return []
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or {}
        events: list[bytes] = []
        tool_calls = [
            call for call in delta.get("tool_calls") or () if call.get("function") is not None
        ]
        if tool_calls:
            call = tool_calls[0]
            if (
                self.state != "tool"
                or self.call is None
                or (call.get("index") is not None and call.get("index") != self.call.index)
            ):
                events += self._close()
                events += self._open_tool(call)
            assert self.call is not None
            arguments = "".join(c["function"].get("arguments") or "" for c in tool_calls)
            if arguments:
                events += self.call.feed(arguments)
        elif delta.get("reasoning") is not None:
            if self.state != "reasoning":
                events += self._close()
                events += self._open_reasoning()
            self.text += delta["reasoning"]
            events.append(self._event({"type": "response.reasoning_text.delta", "item_id": self.item_id,
                                       "output_index": self.output_index, "content_index": 0, "delta": delta["reasoning"]}))  # fmt: skip
        elif delta.get("content"):
            if self.state != "content":
                events += self._close()
                events += self._open_content()
            self.text += delta["content"]
            events.append(self._event({"type": "response.output_text.delta", "content_index": 0,
                                       "output_index": self.output_index, "item_id": self.item_id,
                                       "delta": delta["content"], "logprobs": []}))  # fmt: skip
        return events

    def finish(self) -> list[bytes]:
        events = self._close()
        response = self.shell.render(status_of(self.finish_reason), self.output, self.usage)
        return [*events, self._event({"type": "response.completed", "response": response})]

    def failed(self, message: str) -> bytes:
        response = self.shell.render("failed", self.output, self.usage)
        response["error"] = {"code": "server_error", "message": message}
        return self._event({"type": "response.failed", "response": response})

    def _open_content(self) -> list[bytes]:
        self.state, self.item_id, self.text = "content", f"msg_{uuid.uuid4().hex}", ""
        return [
            self._event({"type": "response.output_item.added", "output_index": self.output_index,
                         "item": _message_item(self.item_id, "", "in_progress")}),
            self._event({"type": "response.content_part.added", "output_index": self.output_index, "item_id": self.item_id,
                         "content_index": 0, "part": {"annotations": [], "text": "", "type": "output_text", "logprobs": []}}),
        ]  # fmt: skip

    def _open_reasoning(self) -> list[bytes]:
        self.state, self.item_id, self.text = "reasoning", f"rs_{uuid.uuid4().hex}", ""
        added: dict[str, Any] = {"id": self.item_id, "summary": [], "type": "reasoning", "content": None, "encrypted_content": None,
                 "status": "in_progress"}  # fmt: skip
        return [
            self._event({"type": "response.output_item.added", "output_index": self.output_index, "item": added}),
            self._event({"type": "response.content_part.added", "output_index": self.output_index, "item_id": self.item_id,
                         "content_index": 0, "part": {"text": "", "type": "reasoning_text"}}),
        ]  # fmt: skip

    def _open_tool(self, call: Mapping[str, Any]) -> list[bytes]:
        self.state = "tool"
        self.call = StreamedCall(self.shell.tools, dict(call), self.output_index, self._event)
        return self.call.open()

    def _close(self) -> list[bytes]:
        index, item_id = self.output_index, self.item_id
        if self.state == "content":
            part: dict[str, Any] = {
                "annotations": [],
                "text": self.text,
                "type": "output_text",
                "logprobs": None,
            }
            item = _message_item(item_id, self.text, "completed")
            events = [
                self._event({"type": "response.output_text.done", "output_index": index, "content_index": 0,
                             "text": self.text, "logprobs": [], "item_id": item_id}),
                self._event({"type": "response.content_part.done", "item_id": item_id, "output_index": index,
                             "content_index": 0, "part": part}),
            ]  # fmt: skip
        elif self.state == "reasoning":
            part = {"text": self.text, "type": "reasoning_text"}
            item = _reasoning_item(item_id, self.text, "completed")
            events = [
                self._event({"type": "response.reasoning_text.done", "item_id": item_id, "output_index": index,
                             "content_index": 0, "text": self.text}),
                self._event({"type": "response.content_part.done", "item_id": item_id, "output_index": index,
                             "content_index": 0, "part": part}),
            ]  # fmt: skip
        elif self.state == "tool" and self.call is not None:
            events, item = self.call.close()
        else:
            return []
        events.append(
            self._event({"type": "response.output_item.done", "output_index": index, "item": item})
        )
        self.output.append(item)
        self.output_index += 1
        self.state = None
        return events

    def _event(self, data: dict[str, Any]) -> bytes:
        data["sequence_number"] = self.sequence
        self.sequence += 1
        return event(data)

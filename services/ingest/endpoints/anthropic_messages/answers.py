"""vLLM's chat answer as an Anthropic message, whole or as Anthropic's stream of events, as vLLM's own
/v1/messages builds them.

Whole: one content block per kind the answer holds, in the order thinking, text,
tool uses (an empty answer is one empty text block). Streamed: `message_start`; then
per block `content_block_start`, its deltas (`text_delta`, `thinking_delta` and a
closing `signature_delta`, `input_json_delta`) and `content_block_stop`; then
`message_delta` with the stop reason and usage, and `message_stop`. Each event goes
out as soon as the chunk behind it arrives. Text that arrives while a tool use is
open is held, and sent as its own text block when the tool use closes.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import orjson


def usage(chat_usage: dict[str, Any] | None) -> dict[str, int]:
    """Anthropic counts input tokens without those read from or written to the cache."""
    if not chat_usage:
        return {"input_tokens": 0, "output_tokens": 0}
    result = {"output_tokens": chat_usage.get("completion_tokens") or 0}
    input_tokens = chat_usage.get("prompt_tokens") or 0
    details = chat_usage.get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        input_tokens -= details["cached_tokens"]
        result["cache_read_input_tokens"] = details["cached_tokens"]
    if details.get("created_cache_tokens") is not None:
        input_tokens -= details["created_cache_tokens"]
        result["cache_creation_input_tokens"] = details["created_cache_tokens"]
    return {"input_tokens": max(0, input_tokens), **result}


def stop_reason(
    finish_reason: str | None, matched: Any, tool_used: bool, tool_complete: bool
) -> tuple[str | None, str | None]:
    """Anthropic's (stop_reason, stop_sequence). max_tokens always wins; a matched stop string wins unless the
    tool calls are complete, since a call it cut short must not run."""
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason not in ("stop", "tool_calls"):
        return None, None
    if tool_complete:
        return "tool_use", None
    if isinstance(matched, str):
        return "stop_sequence", matched
    if finish_reason == "tool_calls" or tool_used:
        return "tool_use", None
    return "end_turn", None


def to_message(chat: dict[str, Any]) -> dict[str, Any]:
    choice = chat["choices"][0]
    message = choice.get("message") or {}
    tool_calls = message.get("tool_calls") or []
    content: list[dict[str, Any]] = []
    if message.get("reasoning"):
        content.append(
            {"type": "thinking", "thinking": message["reasoning"], "signature": uuid.uuid4().hex}
        )
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in tool_calls:
        content.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                        "input": _arguments(call["function"].get("arguments"))})  # fmt: skip
    reason, sequence = stop_reason(
        choice.get("finish_reason"), choice.get("stop_reason"), bool(tool_calls), bool(tool_calls)
    )
    answer = {"id": chat["id"], "type": "message", "role": "assistant", "content": content or [{"type": "text", "text": ""}],
              "model": chat["model"], "stop_reason": reason, "stop_sequence": sequence, "usage": usage(chat.get("usage"))}  # fmt: skip
    # As vLLM serializes it: fields without a value are left out.
    return {key: value for key, value in answer.items() if value is not None}


def _arguments(arguments: str | None) -> dict[str, Any]:
    """A tool use's input: the model's arguments when they are a JSON object. Otherwise (a small model's
    malformed call) an empty input, which the agent's tool refuses; the sampled tokens are recorded either way."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def error_event(error: dict[str, str]) -> bytes:
    return event("error", {"type": "error", "error": error})


class MessageStream:
    """Anthropic's events for a chat stream, fed chunk by chunk."""

    def __init__(self) -> None:
        self.started = False
        self.index = 0
        self.block: str | None = None
        self.signature: str | None = None
        self.tool_use_id: str | None = None
        self.pending_text: list[str] = []
        self.finish_reason: str | None = None
        self.matched: Any = None
        self.tool_used = False
        self.tool_arguments: list[str] = []
        self.tool_ids: dict[int, str] = {}

    def feed(self, chunk: dict[str, Any]) -> list[bytes]:
        if not self.started:
            # The first chunk announces the message (vLLM's first chunk carries the role and no content).
            self.started = True
            message = {"id": chunk["id"], "type": "message", "role": "assistant", "content": [], "model": chunk["model"],
                       "stop_reason": None, "stop_sequence": None, "usage": usage(chunk.get("usage"))}  # fmt: skip
            return [event("message_start", {"type": "message_start", "message": message})]
        choices = chunk.get("choices") or []
        if not choices:
            # The closing usage chunk.
            events = self._close_block()
            reason, sequence = stop_reason(self.finish_reason or "stop", self.matched, self.tool_used,
                                           self.tool_used and _is_json("".join(self.tool_arguments)))  # fmt: skip
            events.append(event("message_delta", {"type": "message_delta", "delta": {"stop_reason": reason,
                                "stop_sequence": sequence}, "usage": usage(chunk.get("usage"))}))  # fmt: skip
            return events
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self.finish_reason, self.matched = choice["finish_reason"], choice.get("stop_reason")
        delta = choice.get("delta") or {}
        events = []
        if delta.get("reasoning"):
            if self.block != "thinking":
                events += self._close_block()
                events.append(self._start({"type": "thinking", "thinking": ""}))
            events.append(self._delta({"type": "thinking_delta", "thinking": delta["reasoning"]}))
        if delta.get("content"):
            if self.block == "tool_use":
                self.pending_text.append(delta["content"])
            else:
                if self.block != "text":
                    events += self._close_block()
                    events.append(self._start({"type": "text", "text": ""}))
                events.append(self._delta({"type": "text_delta", "text": delta["content"]}))
        for call in delta.get("tool_calls") or ():
            events += self._tool_call(call)
        return events

    def finish(self) -> list[bytes]:
        return [*self._close_block(), event("message_stop", {"type": "message_stop"})]

    def _tool_call(self, call: dict[str, Any]) -> list[bytes]:
        events: list[bytes] = []
        function = call.get("function") or {}
        call_id = call.get("id")
        if call_id is not None:
            self.tool_ids[call.get("index", 0)] = call_id
            if self.tool_use_id != call_id and function.get("name") is not None:
                events += self._close_block()
                self.tool_used = True
                self.tool_arguments = []
                events.append(
                    self._start(
                        {"type": "tool_use", "id": call_id, "name": function["name"], "input": {}}
                    )
                )
        else:
            call_id = self.tool_ids.get(call.get("index", 0))
        if call_id is not None and function.get("arguments") and self.tool_use_id == call_id:
            self.tool_arguments.append(function["arguments"])
            events.append(
                self._delta({"type": "input_json_delta", "partial_json": function["arguments"]})
            )
        return events

    def _start(self, block: dict[str, Any]) -> bytes:
        self.block = block["type"]
        self.signature = uuid.uuid4().hex if self.block == "thinking" else None
        self.tool_use_id = block.get("id") if self.block == "tool_use" else None
        return event(
            "content_block_start",
            {"type": "content_block_start", "index": self.index, "content_block": block},
        )

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return event(
            "content_block_delta",
            {"type": "content_block_delta", "index": self.index, "delta": delta},
        )

    def _close_block(self) -> list[bytes]:
        """Close the open block; text held back during a tool use follows as a block of its own."""
        held, self.pending_text = "".join(self.pending_text), []
        events = self._stop_block()
        if held:
            events.append(self._start({"type": "text", "text": ""}))
            events.append(self._delta({"type": "text_delta", "text": held}))
            events += self._stop_block()
        return events

    def _stop_block(self) -> list[bytes]:
        if self.block is None:
            return []
        events = []
        if self.signature is not None:
            events.append(self._delta({"type": "signature_delta", "signature": self.signature}))
        events.append(
            event("content_block_stop", {"type": "content_block_stop", "index": self.index})
        )
        self.block, self.signature, self.tool_use_id = None, None, None
        self.index += 1
        return events


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True

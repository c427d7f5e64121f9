"""A tool call the policy made as the output item the agent declared it for, whole or streamed, as vLLM's
/v1/responses builds it (its `build_response_output_items` and `emit_simple_tool_call_*`).

A call to a function comes back as a `function_call` carrying its namespace (null for a
tool outside one); a call to a custom tool's shim as a `custom_tool_call` whose input is
the shim's string argument, streamed as `response.custom_tool_call_input.delta` events,
each the part of the input decoded so far.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from parity.services.ingest.endpoints.openai_responses.tool_catalog import (
    CUSTOM_INPUT,
    DeclaredTool,
    ToolCatalog,
    decode_custom_input,
)

# An unfinished escape at the end of streamed arguments is at most this long (`\uXXX`).
LONGEST_UNFINISHED_ESCAPE = 6


def function_call(
    item_id: str, call_id: str, tool: DeclaredTool, arguments: str, status: str
) -> dict[str, Any]:
    item = {"arguments": arguments, "call_id": call_id, "name": tool.name, "type": "function_call", "id": item_id,
            "namespace": tool.namespace, "status": status}  # fmt: skip
    # vLLM 0.32 spells out a namespaced call's unset `async` and `caller` too (tests/integration/ingest/
    # test_answer_fields.py holds both spellings to its answers).
    return item | {"async": None, "caller": None} if tool.namespace else item


def custom_tool_call(
    item_id: str, call_id: str, tool: DeclaredTool, payload: str
) -> dict[str, Any]:
    return {"call_id": call_id, "input": payload, "name": tool.name, "type": "custom_tool_call", "id": item_id,
            "async": None, "caller": None, "namespace": tool.namespace}  # fmt: skip


def call_item(tools: ToolCatalog, call: dict[str, Any]) -> dict[str, Any]:
    """A finished chat tool call as its output item."""
    function = call["function"]
    tool = tools.called(function["name"])
    arguments = function.get("arguments") or ""
    if tool.custom:
        return custom_tool_call(
            f"ctc_{uuid.uuid4().hex}", call["id"], tool, decode_custom_input(arguments)
        )
    return function_call(f"fc_{uuid.uuid4().hex}", call["id"], tool, arguments, "completed")


def decode_custom_input_prefix(arguments: str) -> str:
    """The part of a custom tool's input that the shim's unfinished arguments hold so far."""
    for cut in range(len(arguments), max(len(arguments) - LONGEST_UNFINISHED_ESCAPE, 0) - 1, -1):
        for closing in ('"}', "}"):
            try:
                parsed = json.loads(arguments[:cut] + closing)
            except ValueError:
                continue
            payload = parsed.get(CUSTOM_INPUT) if isinstance(parsed, dict) else None
            if isinstance(payload, str):
                # Half of a surrogate pair waits for its other half.
                return payload[:-1] if payload and "\ud800" <= payload[-1] <= "\udbff" else payload
    return ""


class StreamedCall:
    """One tool call's events as its arguments stream in. `event` numbers and renders an event."""

    def __init__(
        self, tools: ToolCatalog, call: dict[str, Any], output_index: int, event: Callable[[dict[str, Any]], bytes]
    ) -> None:  # fmt: skip
        self.tool = tools.called(call["function"].get("name") or "")
        self.index = call.get("index")
        self.call_id = call.get("id") or f"call_{uuid.uuid4().hex[:24]}"
        self.output_index = output_index
        self.item_id = f"{'ctc' if self.tool.custom else 'fc'}_{uuid.uuid4().hex}"
        self.arguments = ""
        self.streamed = ""  # the custom input sent so far
        self.event = event

    def open(self) -> list[bytes]:
        item = (
            custom_tool_call(self.item_id, self.call_id, self.tool, "")
            if self.tool.custom
            else function_call(self.item_id, self.call_id, self.tool, "", "in_progress")
            | {"async": None, "caller": None}
            | ({} if self.tool.namespace else {"created_by": None})
        )
        return [
            self.event(
                {
                    "type": "response.output_item.added",
                    "output_index": self.output_index,
                    "item": item,
                }
            )
        ]

    def feed(self, arguments: str) -> list[bytes]:
        self.arguments += arguments
        if self.tool.custom:
            return self._input_delta(decode_custom_input_prefix(self.arguments))
        return [self.event({"type": "response.function_call_arguments.delta", "output_index": self.output_index,
                            "item_id": self.item_id, "delta": arguments})]  # fmt: skip

    def close(self) -> tuple[list[bytes], dict[str, Any]]:
        """The closing events, and the finished item."""
        if self.tool.custom:
            payload = decode_custom_input(self.arguments)
            events = self._input_delta(payload)
            events.append(self.event({"type": "response.custom_tool_call_input.done", "output_index": self.output_index,
                                      "item_id": self.item_id, "input": payload}))  # fmt: skip
            item = custom_tool_call(self.item_id, self.call_id, self.tool, payload)
        else:
            events = [self.event({"type": "response.function_call_arguments.done", "output_index": self.output_index,
                                  "item_id": self.item_id, "arguments": self.arguments, "name": self.tool.name})]  # fmt: skip
            item = function_call(self.item_id, self.call_id, self.tool, self.arguments, "completed")
        return events, item

    def _input_delta(self, payload: str) -> list[bytes]:
        if payload == self.streamed:
            return []
        # A payload that does not extend what was sent cannot be taken back: it is sent again whole, as vLLM does.
        delta = payload[len(self.streamed) :] if payload.startswith(self.streamed) else payload
        self.streamed = payload
        return [self.event({"type": "response.custom_tool_call_input.delta", "output_index": self.output_index,
                            "item_id": self.item_id, "delta": delta})]  # fmt: skip

"""The tools a Responses request declares, as the function tools the policy is shown, and the way back.

vLLM renders a Responses request's tools as chat function tools (its `get_function_tools`),
and ingest shows the policy the same: a `function` tool as itself; a function inside a
`namespace` tool under the flat name `<namespace>__<name>`; a `custom` tool (free-form
text) as a function of one string argument, `{"input": ...}`. Beyond what vLLM 0.32
serves, ingest takes what Codex CLI sends: tools declared by `additional_tools` input
items (after the request's own, in input order), `custom` tools inside a namespace, and
`custom` tools with a grammar format. A grammar is neither shown nor enforced: the tool
is shown as a free-form one is. A client-executed `tool_search` is not shown, as vLLM
drops it: every deferred tool (`defer_loading`) is shown up front instead, so there is
nothing left to search for. Hosted tools (web search, file search, ...) are refused:
ingest cannot run them and the policy would be told of a tool that never answers.

A call the policy makes comes back to the agent as the kind of tool it declared: a
`function_call` with its namespace, or a `custom_tool_call` whose input is the string
argument.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parity.services.ingest import openai_errors

NAMESPACE_SEPARATOR = "__"
CUSTOM_INPUT = "input"
# vLLM's single-string function shim for a custom tool (vllm.tool_parsers.utils.custom_tool_parameters).
CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {
        CUSTOM_INPUT: {"type": "string", "description": "The freeform text payload for this tool."}
    },
    "required": [CUSTOM_INPUT],
    "additionalProperties": False,
}
FUNCTION_FIELDS = ("name", "description", "parameters", "strict")
CUSTOM_FORMATS = ("text", "grammar")
NOT_SHOWN = ("tool_search",)
CODEX_HINTS = {"web_search": ' (Codex CLI: web_search = "disabled" in its config)'}


def flat_name(namespace: str | None, name: str) -> str:
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def encode_custom_input(payload: str) -> str:
    """A custom tool's input as the arguments of its function shim, spelled as vLLM spells them."""
    return json.dumps({CUSTOM_INPUT: payload}, ensure_ascii=False)


def decode_custom_input(arguments: str) -> str:
    """The input of a finished call to a custom tool's shim; arguments that are not the shim's pass as they are."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    payload = parsed.get(CUSTOM_INPUT) if isinstance(parsed, dict) else None
    return payload if isinstance(payload, str) else arguments


@dataclass(frozen=True)
class DeclaredTool:
    """What the agent declared behind a name the policy calls."""

    name: str
    namespace: str | None = None
    custom: bool = False


@dataclass
class ToolCatalog:
    """The request's tools as chat tools, in the order the policy is shown them, and each flat name's tool."""

    chat_tools: list[dict[str, Any]] = field(default_factory=list)
    declared: dict[str, DeclaredTool] = field(default_factory=dict)

    def called(self, name: str) -> DeclaredTool:
        """The tool behind a call the policy made; a name no tool has is a plain function call, as vLLM answers it."""
        return self.declared.get(name) or DeclaredTool(name)

    def resolve_choice(self, name: str) -> str:
        """A named tool choice as the flat name the policy knows: the flat name itself, or a local name that only
        one namespace has (vLLM's `_resolve_named_tool_choice`)."""
        if name in self.declared:
            return name
        candidates = [flat for flat, tool in self.declared.items() if tool.name == name]
        if len(candidates) == 1:
            return candidates[0]
        if candidates:
            raise openai_errors.bad_request(
                f"tool_choice {name!r} is ambiguous: it is defined in more than one namespace "
                f"({', '.join(candidates)}); select it by its full '<namespace>__<name>' name",
                "tool_choice",
            )
        raise openai_errors.bad_request(
            f"tool_choice names {name!r}, which no declared tool has", "tool_choice"
        )

    def add(self, tools: Any, where: str) -> None:
        if not isinstance(tools, list):
            raise openai_errors.bad_request("tools must be an array", where)
        for index, tool in enumerate(tools):
            self._add_tool(tool, f"{where}.{index}", None)

    def _add_tool(self, tool: Any, where: str, namespace: str | None) -> None:
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        if kind in NOT_SHOWN and namespace is None:
            return
        if kind == "namespace" and namespace is None:
            name = tool.get("name")
            if not isinstance(name, str) or not name:
                raise openai_errors.bad_request("a namespace tool needs a name", f"{where}.name")
            inner = tool.get("tools")
            if not isinstance(inner, list):
                raise openai_errors.bad_request(
                    "a namespace tool's tools must be an array", f"{where}.tools"
                )
            for index, member in enumerate(inner):
                self._add_tool(member, f"{where}.tools.{index}", name)
            return
        if kind not in ("function", "custom"):
            shown = "function and custom tools" + ("" if namespace else ", and namespaces of them,")
            raise openai_errors.bad_request(
                f"tool type {kind!r} is not supported: only {shown} reach the policy{CODEX_HINTS.get(str(kind), '')}",
                f"{where}.type",
            )
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise openai_errors.bad_request(f"a {kind} tool needs a name", f"{where}.name")
        shown_as = flat_name(namespace, name)
        if shown_as in self.declared:
            raise openai_errors.bad_request(
                f"two tools are shown to the policy as {shown_as!r}", f"{where}.name"
            )
        if kind == "custom":
            _check_custom_format(tool.get("format"), where)
            function = {
                "name": shown_as,
                "description": tool.get("description"),
                "parameters": CUSTOM_PARAMETERS,
            }
        else:
            function = {key: tool[key] for key in FUNCTION_FIELDS if key in tool}
            function["name"] = shown_as
        self.chat_tools.append({"type": "function", "function": function})
        self.declared[shown_as] = DeclaredTool(name, namespace, kind == "custom")


def _check_custom_format(custom_format: Any, where: str) -> None:
    if custom_format is None:
        return
    kind = custom_format.get("type") if isinstance(custom_format, Mapping) else None
    if kind not in CUSTOM_FORMATS:
        raise openai_errors.bad_request(
            f"a custom tool's format must be text or grammar, got {kind!r}",
            f"{where}.format.type",
        )


def tool_catalog(request: Mapping[str, Any]) -> ToolCatalog:
    """The request's `tools`, then the tools of each `additional_tools` input item."""
    catalog = ToolCatalog()
    if request.get("tools") is not None:
        catalog.add(request["tools"], "tools")
    items = request.get("input")
    for index, item in enumerate(items if isinstance(items, list) else ()):
        if isinstance(item, Mapping) and item.get("type") == "additional_tools":
            catalog.add(item.get("tools"), f"input.{index}.tools")
    return catalog

"""Parity's harness for verifiers environments: the chat loop runs in the bridge's own process.

verifiers' own chat harnesses launch a program that `uv` must first provision (a download), in a runtime
that is remote by default. This one needs neither: the loop runs here, every model call goes through the
rollout's interception `endpoint` (so verifiers records the trace its rewards read, and applies the run's
sampling settings), tools come from the task's MCP servers, and a reply with no tool call ends the turn.
`stream` picks streamed or whole replies; `require_tool` makes the first call a tool call.

Runs in the interpreter that has verifiers (`env_python`), never in Parity's: it imports no parity module.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from typing import Any

import verifiers.v1 as vf
from openai import AsyncOpenAI
from verifiers.v1.harnesses.utils.mcp import call_mcp, connect_mcp

__all__ = ["ParityHarness", "ParityHarnessConfig"]


class ParityHarnessConfig(vf.HarnessConfig):
    stream: bool = False
    """Ask for streamed replies (server-sent events) instead of whole ones."""
    require_tool: bool = False
    """The rollout's first call must call one of the task's tools (`tool_choice: required`), for a model that
    does not call tools on its own yet; later calls choose."""


class ParityHarness(vf.Harness[ParityHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_MCP = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages.extend(message.model_dump(exclude_none=True) for message in prompt)
        # No retries here: a retried call would land in the same Parity session as a second turn.
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        servers = {
            name: {"url": url, "timeout": self.config.tool_timeout}
            for name, url in mcp_urls.items()
        }
        async with AsyncExitStack() as stack:
            stack.push_async_callback(client.close)
            tools, dispatch, connections = (
                await connect_mcp({"mcpServers": servers}, stack) if servers else ([], {}, {})
            )
            first = True
            while trace.stop_condition is None:
                choice = "required" if first and tools and self.config.require_tool else None
                message = await self._reply(client, ctx.model, messages, tools, choice)
                first = False
                messages.append(message)
                calls = message.get("tool_calls") or []
                if not calls:
                    break
                for call in calls:
                    name, arguments = call["function"]["name"], call["function"].get("arguments")
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": call["id"],
                            "content": await _run_tool(connections, dispatch, name, arguments),
                        }
                    )
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")

    async def _reply(
        self,
        client: AsyncOpenAI,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        tool_choice: str | None,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"model": model, "messages": messages}
        if tools:
            request["tools"] = tools
        if tool_choice:
            request["tool_choice"] = tool_choice
        if not self.config.stream:
            completion = await client.chat.completions.create(**request)
            return completion.choices[0].message.model_dump(exclude_none=True)
        stream = await client.chat.completions.create(**request, stream=True)
        return await _streamed_message(stream)


async def _streamed_message(stream: Any) -> dict[str, Any]:
    """The assistant message a stream of chunks spells out: its text and its tool calls, by index. (The
    SDK's own stream helper parses tool arguments, and only for strict tools.)"""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    async for chunk in stream:
        for choice in chunk.choices[:1]:
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
            for part in delta.tool_calls or []:
                call = calls.setdefault(
                    part.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] += part.id or ""
                if part.function is not None:
                    call["function"]["name"] += part.function.name or ""
                    call["function"]["arguments"] += part.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return message


async def _run_tool(
    connections: dict[str, Any],
    dispatch: dict[str, tuple[str, str]],
    name: str,
    arguments: str | None,
) -> Any:
    """A tool's result, or what went wrong as the result, so the model may try again."""
    if name not in dispatch:
        return f"error: no tool {name!r}"
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError as error:
        return f"error: the arguments are not JSON ({error})"
    if not isinstance(parsed, dict):
        return "error: the arguments must be a JSON object"
    try:
        return await call_mcp(connections, dispatch, name, parsed)
    except Exception as error:  # noqa: BLE001 - a tool's failure is the model's to read, not the rollout's end
        return f"error: {type(error).__name__}: {error}"

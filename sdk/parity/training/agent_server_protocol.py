"""The lines an agent server reads and writes: one JSON object a line, a request in and its reply out.

A request, on the process's stdin:

    {"id": "7", "task": {...}, "openai_base_url": "http://…/sessions/SLUG/v1",
     "anthropic_base_url": "http://…/sessions/SLUG", "session": "SLUG"}

`task` is the task row with `model`, `max_tokens` and `temperature` filled in, as a
Python agent gets it; the base URLs are the rollout's session, which every call of the
rollout goes to. The reply, on its stdout, carries the request's `id` and one of:

    {"id": "7", "reward": 0.7}       the rollout's reward (null: it reported rewards itself)
    {"id": "7", "output": "..."}     what the run's reward function scores, reward(task, output)
    {"id": "7", "error": "why"}      the rollout fails with this message; the process serves on

A stdout line that is not a JSON object, or an object with none of these keys, is the
program's own print and is passed over. An object that looks like a reply without the
request's id breaks the protocol, and fails the rollout at once rather than at its timeout.
"""

from __future__ import annotations

import json
from typing import Any

REPLY_KEYS = ("reward", "output", "error")


class AgentServerFailed(RuntimeError):
    """The rollout failed in the agent server: it replied with an error, broke the protocol, or exited."""


class ProtocolError(AgentServerFailed):
    """A line the process wrote that is a reply in form but not one Parity can take."""


def encode_request(
    request_id: str, task: dict[str, Any], *, openai_base_url: str, anthropic_base_url: str, session: str | None
) -> bytes:  # fmt: skip
    request: dict[str, Any] = {"id": request_id, "task": task, "openai_base_url": openai_base_url,
                               "anthropic_base_url": anthropic_base_url}  # fmt: skip
    if session is not None:
        request["session"] = session
    # One line: json.dumps escapes every newline inside a string.
    return (json.dumps(request, default=str) + "\n").encode()


def read_reply(line: bytes, request_id: str) -> dict[str, Any] | None:
    """The reply to `request_id` that `line` is; None for a line that is no reply."""
    try:
        data = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    if "id" not in data:
        if any(key in data for key in REPLY_KEYS):
            raise ProtocolError(
                f"replied {_shown(line)} without the request's id; a reply carries it: "
                f'{{"id": "{request_id}", "reward": ...}}'
            )
        return None
    if data["id"] != request_id:
        raise ProtocolError(f"replied to id {data['id']!r} while serving request {request_id!r}")
    return data


def reply_reward(reply: dict[str, Any], name: str) -> float | None:
    """The rollout's reward the reply gives: a float, or None when the agent reported rewards itself."""
    _raise_if_error(reply, name)
    if "reward" not in reply:
        raise ProtocolError(
            f'{name} replied {_shown(reply)}: a reply carries "reward" (a number, or null), "output" or "error"'
        )
    value = reply["reward"]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProtocolError(f'{name} replied {_shown(reply)}: "reward" must be a number or null')
    return float(value)


def reply_output(reply: dict[str, Any], name: str) -> str:
    """The output the run's reward function scores."""
    _raise_if_error(reply, name)
    output = reply.get("output")
    if not isinstance(output, str):
        raise ProtocolError(
            f'{name} replied {_shown(reply)}: the run scores output with its reward function; reply {{"id": ..., "output": "..."}}'
        )
    return output


def _raise_if_error(reply: dict[str, Any], name: str) -> None:
    if reply.get("error") is not None:
        raise AgentServerFailed(f"{name}: {reply['error']}")


def _shown(value: bytes | dict[str, Any]) -> str:
    text = value.decode(errors="replace").strip() if isinstance(value, bytes) else json.dumps(value)
    return repr(text if len(text) <= 200 else text[:200] + "…")

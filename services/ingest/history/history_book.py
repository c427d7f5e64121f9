"""What `exact_history` keeps of each trajectory's last call, and whether a new request continues it.

A request continues the last call when its messages are that call's messages, then the
reply ingest returned, then at least one new message, and nothing else that shapes the
prompt (tools, template settings) changed. The reply is compared as the template would
see it: content and tool calls, not the ids or extra fields an SDK adds when it echoes
a message back. Anything else is a fallback, with its reason.

The book lives in the ingest process, bounded by a token budget (least recently used
trajectories go first). A trajectory it does not know (the first call, one forgotten,
one whose earlier calls another ingest served) is rendered as deployed.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

# Request fields besides the messages that change how a template renders a prompt.
PROMPT_SHAPING_FIELDS = ("tools", "chat_template", "chat_template_kwargs", "documents")

HISTORY_CHANGED = "history_changed"
REPLY_CHANGED = "reply_changed"
REQUEST_CHANGED = "request_changed"
NO_NEW_TURNS = "no_new_turns"

TrajectoryKey = tuple[str, str]


@dataclass(frozen=True)
class LastCall:
    messages: tuple[bytes, ...]
    """Each message the call was sent, as canonical JSON."""
    reply: bytes
    """The reply it got, normalized (see `reply_key`)."""
    request: bytes
    """The request's prompt-shaping fields, as canonical JSON."""
    sequence: npt.NDArray[np.int32]
    """The prompt's ids followed by the sampled ids."""


@dataclass(frozen=True)
class Continuation:
    sequence: npt.NDArray[np.int32]
    new_messages: list[dict[str, Any]]


class HistoryBook:
    def __init__(self, budget_tokens: int) -> None:
        self.budget_tokens = budget_tokens
        self._calls: OrderedDict[TrajectoryKey, LastCall] = OrderedDict()
        self._tokens = 0

    @property
    def trajectories(self) -> int:
        return len(self._calls)

    def continuation(self, key: TrajectoryKey, body: dict[str, Any]) -> Continuation | str | None:
        """The known sequence and the new messages when `body` continues the last call; else the reason it does
        not, or None when no earlier call of the trajectory is known."""
        last = self._calls.get(key)
        if last is None:
            return None
        self._calls.move_to_end(key)
        messages = body["messages"]
        known = len(last.messages)
        if len(messages) <= known or tuple(_canonical(m) for m in messages[:known]) != last.messages:
            return HISTORY_CHANGED
        if not _is_reply(messages[known]) or reply_key(messages[known]) != last.reply:
            return REPLY_CHANGED
        if request_key(body) != last.request:
            return REQUEST_CHANGED
        if len(messages) == known + 1:
            return NO_NEW_TURNS
        return Continuation(last.sequence, messages[known + 1 :])

    def remember(self, key: TrajectoryKey, body: dict[str, Any], reply: dict[str, Any], sequence: Sequence[int]) -> None:
        ids = np.asarray(sequence, dtype=np.int32)
        entry = LastCall(tuple(_canonical(m) for m in body["messages"]), reply_key(reply), request_key(body), ids)
        if (old := self._calls.pop(key, None)) is not None:
            self._tokens -= len(old.sequence)
        self._calls[key] = entry
        self._tokens += len(ids)
        while self._tokens > self.budget_tokens and self._calls:
            _, evicted = self._calls.popitem(last=False)
            self._tokens -= len(evicted.sequence)


def reply_key(message: dict[str, Any]) -> bytes:
    """An assistant message as its content and tool calls (name, parsed arguments)."""
    content = message.get("content") or ""
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        arguments = function.get("arguments", "")
        with contextlib.suppress(orjson.JSONDecodeError):
            arguments = orjson.loads(arguments) if isinstance(arguments, str) else arguments
        calls.append([function.get("name", ""), arguments])
    return orjson.dumps([content, calls], option=orjson.OPT_SORT_KEYS)


def request_key(body: dict[str, Any]) -> bytes:
    return orjson.dumps({name: body.get(name) for name in PROMPT_SHAPING_FIELDS}, option=orjson.OPT_SORT_KEYS)


def _is_reply(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "assistant"


def _canonical(message: Any) -> bytes:
    return orjson.dumps(message, option=orjson.OPT_SORT_KEYS)

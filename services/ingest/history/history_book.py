"""What `exact_history` keeps of each conversation's last call, and whether a new request continues it.

A trajectory may hold several conversations at once: an agent that runs subagents
interleaves its own calls with theirs. A request belongs to the conversation whose
opening (the messages of its first call) it repeats and goes past; one that repeats no
known opening starts a conversation of its own. Where the agent names its threads
(`X-Parity-Thread`), each thread's conversations are kept apart.

A request continues its conversation's last call when its messages are that call's
messages, then the reply ingest returned, then at least one new message, and nothing
else that shapes the prompt (tools, template settings) changed. The reply is compared as
the template would see it: content and tool calls, not the ids or extra fields an SDK
adds when it echoes a message back. Anything else is a fallback, with its reason.

The book lives in the ingest process, bounded by a token budget (least recently used
conversations go first) and by conversations per trajectory. A conversation it does not
know (the first call, one forgotten, one whose earlier calls another ingest served) is
rendered as deployed.
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

# Session id, trajectory name, thread id.
TrajectoryKey = tuple[str, str, str]
# Conversations kept per trajectory and thread, as the assembler keeps threads open (prefix_merge).
MAX_CONVERSATIONS = 64


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
    opening: int
    """How many messages the conversation's first call was sent."""

    def opened(self, messages: Sequence[bytes]) -> bool:
        """Whether canonical `messages` belong to this conversation: its opening, then more."""
        return (
            len(messages) > self.opening
            and tuple(messages[: self.opening]) == self.messages[: self.opening]
        )


@dataclass(frozen=True)
class Continuation:
    sequence: npt.NDArray[np.int32]
    new_messages: list[dict[str, Any]]


class HistoryBook:
    def __init__(self, budget_tokens: int, max_conversations: int = MAX_CONVERSATIONS) -> None:
        self.budget_tokens = budget_tokens
        self.max_conversations = max_conversations
        # Each trajectory's conversations, the least recently continued first;
        # the trajectories, the least recently used first.
        self._calls: OrderedDict[TrajectoryKey, list[LastCall]] = OrderedDict()
        self._tokens = 0

    @property
    def trajectories(self) -> int:
        return len(self._calls)

    @property
    def conversations(self) -> int:
        return sum(map(len, self._calls.values()))

    def continuation(self, key: TrajectoryKey, body: dict[str, Any]) -> Continuation | str | None:
        """The known sequence and the new messages when `body` continues its conversation's last call; else the
        reason it does not, or None when it belongs to no conversation the book knows."""
        known = self._calls.get(key)
        if known is None:
            return None
        self._calls.move_to_end(key)
        return _place(known, body)[1]

    def remember(
        self,
        key: TrajectoryKey,
        body: dict[str, Any],
        reply: dict[str, Any],
        sequence: Sequence[int],
    ) -> None:
        """Keep the call as its conversation's last: the conversation the request belongs to, else a new one."""
        ids = np.asarray(sequence, dtype=np.int32)
        known = self._calls.pop(key, [])
        old, _ = _place(known, body)
        opening = len(body["messages"])
        if old is not None:
            known.remove(old)
            self._tokens -= len(old.sequence)
            opening = old.opening
        canonical = tuple(_canonical(m) for m in body["messages"])
        known.append(LastCall(canonical, reply_key(reply), request_key(body), ids, opening))
        self._tokens += len(ids)
        if len(known) > self.max_conversations:
            self._tokens -= len(known.pop(0).sequence)
        self._calls[key] = known
        while self._tokens > self.budget_tokens and self._calls:
            oldest_key, oldest = next(iter(self._calls.items()))
            self._tokens -= len(oldest.pop(0).sequence)
            if not oldest:
                del self._calls[oldest_key]


def _place(
    known: list[LastCall], body: dict[str, Any]
) -> tuple[LastCall | None, Continuation | str | None]:
    """The conversation `body` belongs to and what it makes of its last call: the one it continues, else the one
    it repeats the most of (the newest of equals) with the reason it does not continue it; (None, None) when it
    belongs to none."""
    messages = body["messages"]
    canonical = [_canonical(m) for m in messages]
    own = [last for last in reversed(known) if last.opened(canonical)]
    outcomes = [(last, _continues(last, messages, canonical, body)) for last in own]
    continued = next(
        ((last, found) for last, found in outcomes if isinstance(found, Continuation)), None
    )
    if continued is not None:
        return continued
    if not outcomes:
        return None, None
    return max(outcomes, key=lambda outcome: _common_length(canonical, outcome[0].messages))


def _continues(
    last: LastCall, messages: list[Any], canonical: list[bytes], body: dict[str, Any]
) -> Continuation | str:
    count = len(last.messages)
    if len(messages) <= count or tuple(canonical[:count]) != last.messages:
        return HISTORY_CHANGED
    if not _is_reply(messages[count]) or reply_key(messages[count]) != last.reply:
        return REPLY_CHANGED
    if request_key(body) != last.request:
        return REQUEST_CHANGED
    if len(messages) == count + 1:
        return NO_NEW_TURNS
    return Continuation(last.sequence, messages[count + 1 :])


def _common_length(messages: Sequence[bytes], known: tuple[bytes, ...]) -> int:
    count = 0
    for new, old in zip(messages, known, strict=False):
        if new != old:
            break
        count += 1
    return count


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
    return orjson.dumps(
        {name: body.get(name) for name in PROMPT_SHAPING_FIELDS}, option=orjson.OPT_SORT_KEYS
    )


def _is_reply(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "assistant"


def _canonical(message: Any) -> bytes:
    return orjson.dumps(message, option=orjson.OPT_SORT_KEYS)

"""Where an assistant turn ends and the next turns begin, in a model's own tokens, learned from its chat template.

Continuing a conversation from the exact ids a model sampled (the `exact_history` mode)
needs the ids the template writes after a reply: the end of the assistant turn, the
turns that follow, and the generation prompt. Nothing here knows any model: the rules
come from rendering probe conversations through the template once per model.

- The probe reply's content (`MARKER`) as the template tokenizes it in place: the
  difference between the probe with that reply and with an empty one.
- What closes an assistant turn: the ids after the marker that every following context
  shares (another user turn, a tool result, the end of the conversation). ChatML's is
  `<|im_end|>` and a newline, Llama 3's `<|eot_id|>`.

A new call's turns are then rendered after a stand-in history (a probe question and
the marker as reply) and cut out after the marker. The stand-in keeps what the real
history would change out of the way: a template that strips reasoning from earlier
turns, or renders a reply differently when it is the last, does so inside the history,
never after its close. The model's sampled ids usually end in the first id of the
close (its stop token); `continue_after` does not repeat it, and adds it when the
model stopped without one (a length cut).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity.core.tokens import common_prefix

Message = dict[str, Any]
Render = Callable[[list[Message], bool], Awaitable[list[int]]]
"""Messages and whether to add the generation prompt, to the ids the template gives them."""

PROBE_QUESTION = "Parity probe question"
MARKER = "Parity probe reply marker"


class TemplateUnsupported(ValueError):
    """The template's renders do not show where an assistant turn ends."""


@dataclass(frozen=True)
class TurnRules:
    marker_ids: tuple[int, ...]
    """The probe reply's content, as tokenized inside an assistant turn."""
    close_ids: tuple[int, ...]
    """What the template writes after an assistant turn's content, whatever follows it."""

    @staticmethod
    def stand_in() -> list[Message]:
        """The history a call's new turns are rendered after, in place of the session's own."""
        return [
            {"role": "user", "content": PROBE_QUESTION},
            {"role": "assistant", "content": MARKER},
        ]

    def tail(self, rendered: Sequence[int]) -> list[int] | None:
        """From a render of `stand_in() + new messages`, the ids after the stand-in reply's content: its close,
        the new turns and the generation prompt. None when the render does not hold the stand-in reply as expected."""
        start = _find(rendered, self.marker_ids)
        if start < 0:
            return None
        tail = list(rendered[start + len(self.marker_ids) :])
        if tail[: len(self.close_ids)] != list(self.close_ids):
            return None
        return tail

    def continue_after(self, sequence: Sequence[int], tail: Sequence[int]) -> list[int]:
        """`sequence` (a prompt and the reply sampled from it) followed by `tail`, without the part of the close the
        model sampled itself."""
        close = self.close_ids
        overlap = next(
            (k for k in range(len(close), 0, -1) if list(sequence[-k:]) == list(close[:k])), 0
        )
        return [*sequence, *tail[overlap:]]


async def derive_turn_rules(render: Render) -> TurnRules:
    """Learn a template's turn boundaries from four renders of probe conversations."""
    question = {"role": "user", "content": PROBE_QUESTION}
    reply, empty_reply = (
        {"role": "assistant", "content": MARKER},
        {"role": "assistant", "content": ""},
    )
    follow_user = {"role": "user", "content": PROBE_QUESTION}
    follow_tool = {"role": "tool", "content": PROBE_QUESTION, "tool_call_id": "probe"}
    marked = await render([question, reply, follow_user], False)
    empty = await render([question, empty_reply, follow_user], False)
    start = _common_prefix(marked, empty)
    end = len(marked) - _common_suffix(marked[start:], empty[start:])
    marker_ids = tuple(marked[start:end])
    if not marker_ids:
        raise TemplateUnsupported("the template renders an assistant reply's content nowhere")
    afters = [marked[end:]]
    for conversation in ([question, reply, follow_tool], [question, reply]):
        rendered = await render(conversation, False)
        at = _find(rendered, marker_ids)
        if at < 0:
            raise TemplateUnsupported(
                "the template renders an assistant reply differently by what follows it"
            )
        afters.append(rendered[at + len(marker_ids) :])
    close = afters[0]
    for after in afters[1:]:
        close = close[: _common_prefix(close, after)]
    if not close:
        raise TemplateUnsupported("the template writes nothing that ends an assistant turn")
    return TurnRules(marker_ids, tuple(close))


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    return common_prefix(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))


def _common_suffix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


def _find(haystack: Sequence[int], needle: Sequence[int]) -> int:
    needle = list(needle)
    first, width = needle[0], len(needle)
    for at in range(len(haystack) - width + 1):
        if haystack[at] == first and list(haystack[at : at + width]) == needle:
            return at
    return -1

"""How each call of a trajectory joins the ones before it, by the assembler's rule (its prefix_merge), read off the
token ids alone so a trajectory the assembler has not built reads the same.

Every sequence stays open as a thread: a call continues the thread whose tokens its prompt extends (the longest
when several do); one that repeats a thread's opening (its first call's whole prompt), goes past it and departs
from it splits that thread; one that repeats no opening opens a thread of its own (an orchestrator's subagent).
Calls the agent named a thread for (`X-Parity-Thread`) join only threads of that name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from parity.api.common.v1 import llm_call_pb2
from parity.core import tokens
from parity.services.console.views.token_text import TokenTexts


@dataclass
class JoinView:
    # first, merged, split, thread (a new one opens) or skipped.
    kind: str
    summary: str
    # Prompt tokens not shown because the blocks above hold them.
    shared: int = 0
    detail: str = ""


@dataclass
class _OpenSequence:
    sequence: np.ndarray
    thread: int
    thread_id: str
    # Tokens of the thread's first prompt: a call that repeats them belongs to the thread.
    opening: int
    # Where the last call's sampled tokens begin.
    prompt_length: int
    # The last call's request messages, which the thread's next call's new messages are read against.
    messages: list[object] = field(default_factory=list)
    # Which of the last call's choices the sequence follows, when it had several.
    choice: int | None = None


class CallJoins:
    """Walks a trajectory's calls in order, keeping every thread's open sequence."""

    def __init__(self, texts: TokenTexts) -> None:
        self.texts = texts
        self.open: list[_OpenSequence] = []
        self.thread_names: list[str] = []

    @property
    def thread_count(self) -> int:
        return len(self.thread_names)

    def join(
        self, call: llm_call_pb2.LlmCall, prompt: np.ndarray, choices: list[np.ndarray], messages: list[object],
        skip_reason: str | None,
    ) -> tuple[JoinView, int, list[object]]:  # fmt: skip
        """The call's join, its thread, and the messages of the thread's call before it (none for a new thread)."""
        if skip_reason is not None:
            return JoinView("skipped", skip_reason), 0, []
        own = [o for o in self.open if o.thread_id == call.thread_id]
        extended = [
            o
            for o in own
            if len(prompt) >= len(o.sequence)
            and np.array_equal(prompt[: len(o.sequence)], o.sequence)
        ]
        if extended:
            base = max(extended, key=lambda o: len(o.sequence))
            join = self._merged(base, prompt)
            self._advance([base], base, prompt, choices, messages)
            return join, base.thread, base.messages
        rewritten = [
            o
            for o in own
            if len(prompt) > o.opening
            and np.array_equal(prompt[: o.opening], o.sequence[: o.opening])
        ]
        if rewritten:
            shared, base = max(
                ((tokens.common_prefix(o.sequence, prompt), o) for o in rewritten),
                key=lambda p: p[0],
            )
            join = JoinView("split", f"prefix broken: a new sample of {self._thread_label(base.thread)} starts here",
                            shared, self._why_split(base, prompt, shared))  # fmt: skip
            self._advance([base], base, prompt, choices, messages)
            return join, base.thread, base.messages
        thread = self.thread_count
        self.thread_names.append(call.thread_id)
        if thread == 0:
            join = JoinView("first", "the trajectory's first sampled call: its whole prompt")
        else:
            name = f" {call.thread_id!r}" if call.thread_id else ""
            join = JoinView("thread", f"opens thread {thread + 1}{name}: a conversation of its own, which repeats no "
                            "open thread's opening (a subagent, an agent called as a tool); its whole prompt")  # fmt: skip
        opened = _OpenSequence(prompt, thread, call.thread_id, len(prompt), len(prompt))
        self._advance([], opened, prompt, choices, messages)
        return join, thread, []

    def _merged(self, base: _OpenSequence, prompt: np.ndarray) -> JoinView:
        where = f" of {self._thread_label(base.thread)}" if self.thread_count > 1 else ""
        where += f" (choice {base.choice})" if base.choice is not None else ""
        return JoinView("merged", f"continues the sequence{where}: {_tokens(len(prompt) - len(base.sequence))} of new "
                        "prompt, loss mask 0, then what it sampled", len(base.sequence))  # fmt: skip

    def _advance(self, ended: list[_OpenSequence], base: _OpenSequence, prompt: np.ndarray, choices: list[np.ndarray],
                 messages: list[object]) -> None:  # fmt: skip
        """The call's choices replace the sequence it continued or rewrote: each a sequence of the thread."""
        self.open = [o for o in self.open if all(o is not e for e in ended)]
        self.open += [_OpenSequence(np.concatenate([prompt, c]), base.thread, base.thread_id, base.opening, len(prompt),
                                    messages, i if len(choices) > 1 else None) for i, c in enumerate(choices)]  # fmt: skip

    def _thread_label(self, thread: int) -> str:
        name = self.thread_names[thread]
        return f"thread {thread + 1}" + (f" {name!r}" if name else "")

    def _why_split(self, base: _OpenSequence, prompt: np.ndarray, shared: int) -> str:
        sequence = base.sequence
        if shared == len(prompt):
            return (f"this prompt is the first {shared} of the {len(sequence)} tokens the sequence already had: "
                    "the history was cut")  # fmt: skip
        expected, got = self.texts.texts([int(sequence[shared]), int(prompt[shared])])
        where = f"at token {shared:,}: the prompt has {got!r} (id {int(prompt[shared])}) where the sequence had {expected!r} (id {int(sequence[shared])})"
        if shared >= base.prompt_length:
            return (f"the previous reply came back re-rendered, {where}, {_tokens(shared - base.prompt_length)} into "
                    "what the model sampled. A chat template that re-tokenizes the reply's text, or drops its "
                    "reasoning, does this")  # fmt: skip
        return f"the history before the previous reply changed, {where}: an edited or re-rendered conversation"


def _tokens(count: int) -> str:
    return f"{count:,} token" if count == 1 else f"{count:,} tokens"

"""Prefix merging: the calls of one trajectory become as few token-exact sequences as possible.

A multi-turn agent re-sends its whole conversation on every call, so a call's prompt
usually starts with an earlier call's prompt and the completion the model sampled.
When it does, byte for byte, the two calls are one sequence: the new prompt tokens (a
tool result, a user turn, template tokens) are appended with loss mask 0, then the new
completion with loss mask 1. Nothing is ever decoded or re-tokenized; every token id in
a sample is one that vLLM reported.

Threads. An agent that runs subagents (an orchestrator and its workers, an agent called
as a tool) interleaves several conversations in one trajectory. Every sequence stays
open as a thread, and a call joins the thread whose tokens its prompt extends (the
longest, when several do), so each conversation is one sequence however the calls
interleave. A call that extends none either rewrites a thread's history or opens a new
thread: it rewrites thread T when it repeats T's opening (the whole prompt of T's first
call), goes on past it, and then departs from T; otherwise it is a new conversation. Where the agent names
its threads (`X-Parity-Thread`, the session slug's thread), a call only joins or
rewrites threads of its own name.

A rewrite finishes the thread's sequence and starts a new one in its place: a split,
counted with its reason, read off where the new prompt leaves the thread:
- `reply_rerendered`: inside the previous reply: its text, rendered again, gave other
  ids than the ones sampled (a template that drops reasoning, or a non-canonical
  tokenization of what was sampled);
- `history_changed`: before the previous reply: earlier turns were edited, or the
  template renders them differently now;
- `history_cut`: the prompt is a strict prefix of the sequence (a truncated history).
The tokens the new sequence shares with the old one are counted as repeated: they are
trained again, so tokens trained ÷ (tokens trained − repeated) is what splits cost.

A call with several choices forks its thread: each choice is a sequence of its own, and
the next call continues whichever choice its prompt extends; the others end with the
trajectory. At most `max_open_threads` sequences stay open: past that, the least
recently extended one ends (counted), so a session of hundreds of threads stays bounded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from parity.core import tokens

_ZERO_FLOAT = b"\x00\x00\x00\x00"
# Open sequences a trajectory keeps before the least recently extended one ends.
DEFAULT_MAX_OPEN_THREADS = 64


@dataclass(frozen=True, slots=True)
class ChoiceTokens:
    token_ids: bytes
    # Packed float32, one per token; empty when the upstream sent none (read as 0).
    logprobs: bytes


@dataclass(frozen=True, slots=True)
class StepTokens:
    """One trainable call of a trajectory: the prompt and what was sampled after it."""

    call_id: str
    # Position of the call among all the trajectory's calls (external ones included).
    index: int
    prompt: bytes
    choices: tuple[ChoiceTokens, ...]
    policy_version: int
    # The thread the agent named for the call; empty: the token ids decide.
    thread_id: str = ""


@dataclass(frozen=True, slots=True)
class StepEnd:
    """Where a step's sampled tokens end in a sample: the place for its step reward."""

    step_index: int
    call_id: str
    # Token position of the step's last sampled token; -1 if it sampled none.
    last_token: int


@dataclass(slots=True)
class MergedSequence:
    """One training sequence: packed token ids, loss mask and rollout logprobs."""

    token_ids: bytes
    loss_mask: bytes
    logprobs: bytes
    steps: list[StepEnd]
    prompt_length: int
    # Oldest policy version among the steps whose tokens were sampled.
    policy_version: int
    # The thread the sequence belongs to: its number in the trajectory, in the order threads opened, and the
    # name the agent gave it (empty when the token ids found it).
    thread_index: int = 0
    thread_id: str = ""

    @property
    def token_count(self) -> int:
        return tokens.token_count(self.token_ids)

    @property
    def call_ids(self) -> list[str]:
        return [step.call_id for step in self.steps]


@dataclass(slots=True)
class MergeResult:
    sequences: list[MergedSequence]
    # Calls appended to the sequence of an earlier call.
    merged_calls: int = 0
    # Calls that rewrote their thread's history instead of extending it, by reason.
    splits: int = 0
    split_reasons: Counter[str] = field(default_factory=Counter)
    # Tokens a split's new sequence shares with the sequence it broke from, in all and by thread.
    repeated_tokens: int = 0
    repeated_by_thread: Counter[int] = field(default_factory=Counter)
    # Conversations in the trajectory: calls that extended and rewrote no open sequence opened one.
    threads: int = 0
    # Sequences ended because more than max_open_threads were open.
    threads_ended_at_limit: int = 0


@dataclass(slots=True)
class _Builder:
    """A sequence being built; pieces are joined once, when it is finished."""

    token_ids: bytearray
    thread_index: int
    thread_id: str
    # The prompt of the thread's first call: a call that repeats it belongs to the thread.
    opening: bytes
    mask: list[bytes] = field(default_factory=list)
    logprobs: list[bytes] = field(default_factory=list)
    steps: list[StepEnd] = field(default_factory=list)
    prompt_length: int = -1
    policy_version: int | None = None
    # Where the last appended call's sampled tokens begin.
    last_sampled_start: int = 0

    def fork(self) -> _Builder:
        return _Builder(
            bytearray(self.token_ids), self.thread_index, self.thread_id, self.opening, list(self.mask),
            list(self.logprobs), list(self.steps), self.prompt_length, self.policy_version, self.last_sampled_start,
        )  # fmt: skip

    def restart(self) -> _Builder:
        """An empty sequence of the same thread, for a call that rewrote its history."""
        return _Builder(bytearray(), self.thread_index, self.thread_id, self.opening)

    def append(self, step: StepTokens, new_prompt: bytes, choice: ChoiceTokens) -> None:
        start = tokens.token_count(self.token_ids)
        self.token_ids += new_prompt
        self.mask.append(bytes(tokens.token_count(new_prompt)))
        self.logprobs.append(bytes(len(new_prompt)))
        sampled = tokens.token_count(choice.token_ids)
        self.token_ids += choice.token_ids
        self.mask.append(b"\x01" * sampled)
        self.logprobs.append(choice.logprobs if choice.logprobs else _ZERO_FLOAT * sampled)
        first_sampled = self.last_sampled_start = start + tokens.token_count(new_prompt)
        self.steps.append(
            StepEnd(step.index, step.call_id, first_sampled + sampled - 1 if sampled else -1)
        )
        if sampled:
            if self.prompt_length < 0:
                self.prompt_length = first_sampled
            if self.policy_version is None or step.policy_version < self.policy_version:
                self.policy_version = step.policy_version

    def finish(self) -> MergedSequence:
        token_ids = bytes(self.token_ids)
        return MergedSequence(
            token_ids=token_ids,
            loss_mask=b"".join(self.mask),
            logprobs=b"".join(self.logprobs),
            steps=self.steps,
            prompt_length=self.prompt_length
            if self.prompt_length >= 0
            else tokens.token_count(token_ids),
            policy_version=self.policy_version or 0,
            thread_index=self.thread_index,
            thread_id=self.thread_id,
        )


def merge_steps(
    steps: Iterable[StepTokens], max_open_threads: int = DEFAULT_MAX_OPEN_THREADS
) -> MergeResult:
    """Merge a trajectory's trainable steps, in order, into one sequence per thread (and per rewrite or fork)."""
    if max_open_threads < 1:
        raise ValueError(f"max_open_threads must be at least 1, got {max_open_threads}")
    result = MergeResult([])
    # Least recently extended first.
    open_: list[_Builder] = []
    for step in steps:
        own = [b for b in open_ if b.thread_id == step.thread_id]
        base = max(
            (b for b in own if step.prompt.startswith(b.token_ids)),
            key=lambda b: len(b.token_ids),
            default=None,
        )
        if base is not None:
            result.merged_calls += 1
            open_.remove(base)
            new_prompt = step.prompt[len(base.token_ids) :]
        else:
            new_prompt = step.prompt
            rewritten = _rewritten(own, step.prompt)
            if rewritten is None:
                base = _Builder(bytearray(), result.threads, step.thread_id, step.prompt)
                result.threads += 1
            else:
                old, reason, shared = rewritten
                result.splits += 1
                result.split_reasons[reason] += 1
                result.repeated_tokens += shared
                result.repeated_by_thread[old.thread_index] += shared
                open_.remove(old)
                result.sequences.append(old.finish())
                base = old.restart()
        forks = [base] + [base.fork() for _ in step.choices[1:]]
        for builder, choice in zip(forks, step.choices, strict=True):
            builder.append(step, new_prompt, choice)
        open_ += forks
        while len(open_) > max_open_threads:
            result.sequences.append(open_.pop(0).finish())
            result.threads_ended_at_limit += 1
    result.sequences += [b.finish() for b in sorted(open_, key=lambda b: b.thread_index)]
    return result


def _rewritten(own: list[_Builder], prompt: bytes) -> tuple[_Builder, str, int] | None:
    """The open sequence whose thread `prompt` rewrites (it repeats the thread's opening, then departs from the
    sequence), judged against the one it shares the most with; why; and how many tokens it shares with it.
    None when `prompt` repeats no open thread's opening: a new thread."""
    # A prompt that is exactly a thread's opening starts that conversation again (a parallel worker given the
    # same task, a retry): a thread of its own, which leaves the first one open.
    candidates = [b for b in own if len(prompt) > len(b.opening) and prompt.startswith(b.opening)]
    if not candidates:
        return None
    ids = tokens.unpack_token_ids(prompt)
    shared, closest = max((tokens.common_prefix(ids, tokens.unpack_token_ids(b.token_ids)), i)
                          for i, b in enumerate(candidates))  # fmt: skip
    old = candidates[closest]
    if shared == len(ids):
        return old, "history_cut", shared
    return (
        old,
        ("reply_rerendered" if shared >= old.last_sampled_start else "history_changed"),
        shared,
    )

"""Prefix merging: the calls of one trajectory become as few token-exact sequences as possible.

A multi-turn agent re-sends its whole conversation on every call, so call k+1's prompt
usually starts with call k's prompt and the completion the model sampled. When it
does, byte for byte, the two calls are one sequence: the new prompt tokens (a tool
result, a user turn, template tokens) are appended with loss mask 0, then the new
completion with loss mask 1. When it does not (a chat template that drops earlier
reasoning, an edited or truncated history), the sequence so far is finished and a new
one starts: a split. Nothing is ever decoded or re-tokenized; every token id in a
sample is one that vLLM reported.

A call with several choices forks the sequence: the next call continues whichever
choice its prompt extends, and every other choice ends as a sample of its own.

Each split is counted with its reason, read off where the new prompt leaves the
sequence it came closest to extending:
- `reply_rerendered`: inside the previous reply: its text, rendered again, gave other
  ids than the ones sampled (a template that drops reasoning, or a non-canonical
  tokenization of what was sampled);
- `history_changed`: before the previous reply: earlier turns were edited, or the
  template renders them differently now;
- `history_cut`: the prompt is a strict prefix of the sequence (a truncated history).
The tokens the new sequence shares with that one are counted as repeated: they are
trained again, so tokens trained ÷ (tokens trained − repeated) is what splits cost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from parity import tokens

_ZERO_FLOAT = b"\x00\x00\x00\x00"


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
    # Calls whose prompt did not extend the sequence before them, by reason.
    splits: int = 0
    split_reasons: Counter[str] = field(default_factory=Counter)
    # Tokens a split's new sequence shares with the sequence it broke from.
    repeated_tokens: int = 0


@dataclass(slots=True)
class _Builder:
    """A sequence being built; pieces are joined once, when it is finished."""

    token_ids: bytearray
    mask: list[bytes] = field(default_factory=list)
    logprobs: list[bytes] = field(default_factory=list)
    steps: list[StepEnd] = field(default_factory=list)
    prompt_length: int = -1
    policy_version: int | None = None
    # Where the last appended call's sampled tokens begin.
    last_sampled_start: int = 0

    def fork(self) -> _Builder:
        return _Builder(
            bytearray(self.token_ids), list(self.mask), list(self.logprobs), list(self.steps),
            self.prompt_length, self.policy_version, self.last_sampled_start,
        )  # fmt: skip

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
        self.steps.append(StepEnd(step.index, step.call_id, first_sampled + sampled - 1 if sampled else -1))
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
            prompt_length=self.prompt_length if self.prompt_length >= 0 else tokens.token_count(token_ids),
            policy_version=self.policy_version or 0,
        )


def merge_steps(steps: Iterable[StepTokens]) -> MergeResult:
    """Merge a trajectory's trainable steps, in order, into sequences."""
    result = MergeResult([])
    open_: list[_Builder] = []
    for step in steps:
        base = None
        if open_:
            base = next((b for b in open_ if step.prompt.startswith(b.token_ids)), None)
            if base is None:
                result.splits += 1
                reason, shared = _split(open_, step.prompt)
                result.split_reasons[reason] += 1
                result.repeated_tokens += shared
            else:
                result.merged_calls += 1
            result.sequences += [b.finish() for b in open_ if b is not base]
        if base is None:
            base, new_prompt = _Builder(bytearray()), step.prompt
        else:
            new_prompt = step.prompt[len(base.token_ids) :]
        forks = [base] + [base.fork() for _ in step.choices[1:]]
        for builder, choice in zip(forks, step.choices, strict=True):
            builder.append(step, new_prompt, choice)
        open_ = forks
    result.sequences += [b.finish() for b in open_]
    return result


def _split(open_: list[_Builder], prompt: bytes) -> tuple[str, int]:
    """Why `prompt` extends none of the open sequences, judged against the one it shares the most with, and how
    many tokens it shares with it."""
    ids = tokens.unpack_token_ids(prompt)
    shared, closest = max((tokens.common_prefix(ids, tokens.unpack_token_ids(b.token_ids)), i)
                          for i, b in enumerate(open_))  # fmt: skip
    if shared == len(ids):
        return "history_cut", shared
    return ("reply_rerendered" if shared >= open_[closest].last_sampled_start else "history_changed"), shared

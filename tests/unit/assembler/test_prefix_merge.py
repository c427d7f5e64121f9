"""Prefix merging never invents, drops or misaligns a token, and splits exactly where a prefix breaks."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from parity import tokens
from parity.services.assembler.prefix_merge import ChoiceTokens, StepTokens, merge_steps

token_lists = st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=12)


def step(index: int, prompt: list[int], *completions: list[int], version: int = 1) -> StepTokens:
    choices = tuple(
        ChoiceTokens(tokens.pack_token_ids(c), tokens.pack_floats([-(index + 1) - i / 100 for i in range(len(c))]))
        for c in completions
    )
    return StepTokens(f"call-{index}", index, tokens.pack_token_ids(prompt), choices, version)


@st.composite
def conversations(draw: st.DrawFn) -> tuple[list[StepTokens], list[bool]]:
    """A multi-turn conversation; `breaks[i]` says whether turn i's prompt was rewritten
    (a template that drops reasoning, an edited history) instead of extended."""
    turns = draw(st.integers(1, 8))
    prompt = draw(token_lists)
    steps, breaks = [], []
    for index in range(turns):
        rewritten = index > 0 and draw(st.booleans())
        if rewritten:
            # Never a prefix of the old sequence: it starts with a token the old one does not.
            prompt = [-1 - index, *draw(token_lists)]
        completion = draw(token_lists)
        steps.append(step(index, prompt, completion, version=draw(st.integers(0, 5))))
        breaks.append(rewritten)
        prompt = prompt + completion + draw(st.lists(st.integers(0, 1000), max_size=5))
    return steps, breaks


def sampled(sequence) -> np.ndarray:
    return tokens.unpack_token_ids(sequence.token_ids)[tokens.unpack_mask(sequence.loss_mask) == 1]


@settings(max_examples=300)
@given(conversations())
def test_merge_keeps_every_sampled_token_and_splits_only_at_breaks(conversation) -> None:
    steps, breaks = conversation
    result = merge_steps(steps)

    assert result.splits == sum(breaks)
    assert result.merged_calls == len(steps) - 1 - sum(breaks)
    assert len(result.sequences) == 1 + sum(breaks)
    assert [s.call_ids for s in result.sequences] == _runs([s.call_id for s in steps], breaks)
    by_call = {s.call_id: s for s in steps}
    for sequence in result.sequences:
        ids = tokens.unpack_token_ids(sequence.token_ids)
        mask = tokens.unpack_mask(sequence.loss_mask)
        logprobs = tokens.unpack_floats(sequence.logprobs)
        assert len(ids) == len(mask) == len(logprobs)
        members = [by_call[c] for c in sequence.call_ids]
        last = members[-1]
        # The sequence is exactly what the model saw and produced at its last call.
        assert sequence.token_ids == last.prompt + last.choices[0].token_ids
        # Loss mask 1 on exactly the sampled tokens, in order, with their own logprobs.
        assert sampled(sequence).tolist() == [t for m in members for t in tokens.unpack_token_ids(m.choices[0].token_ids)]
        expected_logprobs = np.concatenate([tokens.unpack_floats(m.choices[0].logprobs) for m in members])
        assert np.array_equal(logprobs[mask == 1], expected_logprobs)
        assert not logprobs[mask == 0].any()
        assert sequence.prompt_length == len(members[0].prompt) // 4
        assert sequence.policy_version == min(m.policy_version for m in members)
        for end in sequence.steps:
            assert mask[end.last_token] == 1 and (end.last_token + 1 == len(mask) or end is not sequence.steps[-1])


def _runs(call_ids: list[str], breaks: list[bool]) -> list[list[str]]:
    runs: list[list[str]] = []
    for call_id, rewritten in zip(call_ids, breaks, strict=True):
        if rewritten or not runs:
            runs.append([])
        runs[-1].append(call_id)
    return runs


@given(token_lists, token_lists, token_lists, token_lists)
def test_the_next_call_continues_the_choice_its_prompt_extends(prompt, first, second, user) -> None:
    if first[: len(second)] == second or second[: len(first)] == first:
        return  # one choice is a prefix of the other: either continuation is right
    result = merge_steps([step(0, prompt, first, second), step(1, prompt + second + user, [7])])
    assert result.merged_calls == 1 and result.splits == 0
    abandoned, continued = result.sequences
    assert abandoned.token_ids == tokens.pack_token_ids(prompt + first)
    assert continued.token_ids == tokens.pack_token_ids(prompt + second + user + [7])
    assert continued.call_ids == ["call-0", "call-1"]


def test_missing_logprobs_read_as_zero_and_an_exact_resend_merges() -> None:
    no_logprobs = StepTokens("a", 0, tokens.pack_token_ids([1, 2]), (ChoiceTokens(tokens.pack_token_ids([3]), b""),), 4)
    again = step(1, [1, 2, 3], [4, 5])
    result = merge_steps([no_logprobs, again])
    (sequence,) = result.sequences
    assert tokens.unpack_mask(sequence.loss_mask).tolist() == [0, 0, 1, 1, 1]
    assert tokens.unpack_floats(sequence.logprobs)[:3].tolist() == [0, 0, 0]
    assert [s.last_token for s in sequence.steps] == [2, 4]


def test_no_steps_no_samples() -> None:
    result = merge_steps([])
    assert (result.sequences, result.merged_calls, result.splits) == ([], 0, 0)


def test_each_split_is_counted_with_its_reason_and_the_tokens_it_repeats() -> None:
    system, question, think, answer, again = [1, 2, 3], [4, 5], [6, 7, 8], [9, 10], [11]
    first = step(0, system + question, think + answer)
    # The template dropped the reasoning from the reply: the prompt leaves the sequence inside what was sampled.
    rerendered = step(1, system + question + answer + again, [12])
    # An edited earlier turn: the prompt leaves the sequence before the reply.
    edited = step(2, system + [99] + again, [13])
    # A truncated history: the prompt is a strict prefix of what came before.
    cut = step(3, system, [14])
    merged = merge_steps([first, rerendered, edited, cut])
    assert merged.splits == 3 and merged.merged_calls == 0
    assert merged.split_reasons == {"reply_rerendered": 1, "history_changed": 1, "history_cut": 1}
    # Each new sequence shares with the one it broke from: 5 (system + question), 3 (system), 3 (system).
    assert merged.repeated_tokens == 5 + 3 + 3
    total = sum(s.token_count for s in merged.sequences)
    assert total - merged.repeated_tokens == 10 + 4 + 3 + 1  # the first sequence, then what each split added


def test_a_merge_repeats_nothing() -> None:
    first = step(0, [1, 2], [3, 4])
    merged = merge_steps([first, step(1, [1, 2, 3, 4, 5], [6])])
    assert (merged.splits, merged.repeated_tokens, dict(merged.split_reasons)) == (0, 0, {})

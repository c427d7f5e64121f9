"""Prefix merging never invents, drops or misaligns a token, and splits exactly where a prefix breaks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.core import tokens
from parity.services.assembler.prefix_merge import ChoiceTokens, StepTokens, merge_steps

token_lists = st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=12)


def step(index: int, prompt: list[int], *completions: list[int], version: int = 1) -> StepTokens:
    choices = tuple(
        ChoiceTokens(
            tokens.pack_token_ids(c),
            tokens.pack_floats([-(index + 1) - i / 100 for i in range(len(c))]),
        )
        for c in completions
    )
    return StepTokens(f"call-{index}", index, tokens.pack_token_ids(prompt), choices, version)


@st.composite
def conversations(draw: st.DrawFn) -> tuple[list[StepTokens], list[bool], list[int]]:
    """Up to four conversations (an orchestrator and its workers) interleaved in one trajectory. `breaks[i]` says
    whether call i rewrote its conversation's history after the opening (a template that drops reasoning, an
    edited history) instead of extending it; `threads[i]` is the conversation call i belongs to."""
    thread_count = draw(st.integers(1, 4))
    order = draw(st.lists(st.integers(0, thread_count - 1), min_size=thread_count, max_size=12))
    order = list(range(thread_count)) + order[thread_count:]
    order = draw(st.permutations(order))
    # Each conversation opens with a token no other one has, after a system prompt they all share.
    system = draw(st.lists(st.integers(0, 1000), max_size=4))
    openings = [system + [-1 - t, *draw(token_lists)] for t in range(thread_count)]
    prompts: list[list[int] | None] = [None] * thread_count
    steps, breaks = [], []
    for index, thread in enumerate(order):
        prompt = prompts[thread]
        rewritten = prompt is not None and draw(st.booleans())
        if prompt is None:
            prompt = openings[thread]
        elif rewritten:
            # The opening again, then a token no sampled sequence holds.
            prompt = [
                *openings[thread],
                -100 - index,
                *draw(st.lists(st.integers(0, 1000), max_size=5)),
            ]
        completion = draw(token_lists)
        steps.append(step(index, prompt, completion, version=draw(st.integers(0, 5))))
        breaks.append(rewritten)
        prompts[thread] = prompt + completion + draw(st.lists(st.integers(0, 1000), max_size=5))
    return steps, breaks, order


def sampled(sequence) -> np.ndarray:
    return tokens.unpack_token_ids(sequence.token_ids)[tokens.unpack_mask(sequence.loss_mask) == 1]


@settings(max_examples=300)
@given(conversations())
def test_each_thread_merges_on_its_own_keeps_every_sampled_token_and_splits_only_at_its_breaks(
    conversation,
) -> None:
    steps, breaks, threads = conversation
    result = merge_steps(steps)

    thread_count = len(set(threads))
    assert result.threads == thread_count
    assert result.splits == sum(breaks)
    assert result.merged_calls == len(steps) - thread_count - sum(breaks)
    assert len(result.sequences) == thread_count + sum(breaks)
    assert sorted(s.call_ids for s in result.sequences) == sorted(
        _runs([s.call_id for s in steps], breaks, threads)
    )
    by_call = {s.call_id: s for s in steps}
    thread_of = {s.call_id: t for s, t in zip(steps, threads, strict=True)}
    for sequence in result.sequences:
        ids = tokens.unpack_token_ids(sequence.token_ids)
        mask = tokens.unpack_mask(sequence.loss_mask)
        logprobs = tokens.unpack_floats(sequence.logprobs)
        assert len(ids) == len(mask) == len(logprobs)
        members = [by_call[c] for c in sequence.call_ids]
        assert len({thread_of[c] for c in sequence.call_ids}) == 1
        last = members[-1]
        # The sequence is exactly what the model saw and produced at its last call.
        assert sequence.token_ids == last.prompt + last.choices[0].token_ids
        # Loss mask 1 on exactly the sampled tokens, in order, with their own logprobs.
        assert sampled(sequence).tolist() == [
            t for m in members for t in tokens.unpack_token_ids(m.choices[0].token_ids)
        ]
        expected_logprobs = np.concatenate(
            [tokens.unpack_floats(m.choices[0].logprobs) for m in members]
        )
        assert np.array_equal(logprobs[mask == 1], expected_logprobs)
        assert not logprobs[mask == 0].any()
        assert sequence.prompt_length == len(members[0].prompt) // 4
        assert sequence.policy_version == min(m.policy_version for m in members)
        for end in sequence.steps:
            assert mask[end.last_token] == 1 and (
                end.last_token + 1 == len(mask) or end is not sequence.steps[-1]
            )
    # Threads are numbered in the order they opened.
    opened = list(dict.fromkeys(threads))
    for sequence in result.sequences:
        assert sequence.thread_index == opened.index(thread_of[sequence.call_ids[0]])
    # What a rewrite repeats is its thread's opening, and only that.
    assert result.repeated_tokens == sum(
        _opening_length(steps, threads, t)
        for t, broke in zip(threads, breaks, strict=True)
        if broke
    )


def _opening_length(steps: list[StepTokens], threads: list[int], thread: int) -> int:
    return len(steps[threads.index(thread)].prompt) // 4


def _runs(call_ids: list[str], breaks: list[bool], threads: list[int]) -> list[list[str]]:
    runs: dict[int, list[list[str]]] = {}
    for call_id, rewritten, thread in zip(call_ids, breaks, threads, strict=True):
        own = runs.setdefault(thread, [])
        if rewritten or not own:
            own.append([])
        own[-1].append(call_id)
    return [run for own in runs.values() for run in own]


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
    no_logprobs = StepTokens(
        "a", 0, tokens.pack_token_ids([1, 2]), (ChoiceTokens(tokens.pack_token_ids([3]), b""),), 4
    )
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
    # An edited earlier turn: the prompt leaves the sequence after the opening, before the reply.
    edited = step(2, system + question + [99] + again, [13])
    # A truncated history: the prompt is a strict prefix of what came before.
    cut = step(3, system + question + [99], [14])
    merged = merge_steps([first, rerendered, edited, cut])
    assert (merged.splits, merged.merged_calls, merged.threads) == (3, 0, 1)
    assert merged.split_reasons == {"reply_rerendered": 1, "history_changed": 1, "history_cut": 1}
    # Each new sequence shares with the one it broke from: 5 (the opening), 5, then 6 (the opening and 99).
    assert merged.repeated_tokens == merged.repeated_by_thread[0] == 5 + 5 + 6
    total = sum(s.token_count for s in merged.sequences)
    assert (
        total - merged.repeated_tokens == 10 + 4 + 3 + 1
    )  # the first sequence, then what each split added
    assert {s.thread_index for s in merged.sequences} == {0}


def test_a_call_that_repeats_no_opening_is_a_new_thread_and_the_first_stays_open() -> None:
    system = [1, 2, 3]
    orchestrator = step(0, system + [4], [5, 6])
    worker = step(1, system + [40], [41])
    orchestrator_again = step(2, system + [4, 5, 6, 7], [8])
    worker_again = step(3, system + [40, 41, 42], [43])
    merged = merge_steps([orchestrator, worker, orchestrator_again, worker_again])
    assert (merged.threads, merged.splits, merged.merged_calls, merged.repeated_tokens) == (
        2,
        0,
        2,
        0,
    )
    assert [s.call_ids for s in merged.sequences] == [["call-0", "call-2"], ["call-1", "call-3"]]
    assert [s.thread_index for s in merged.sequences] == [0, 1]


def test_the_same_opening_twice_is_two_threads() -> None:
    """Two workers handed the same task: each continues its own sequence, neither rewrites the other's."""
    opening = [1, 2, 3]
    calls = [
        step(0, opening, [4]),
        step(1, opening, [5]),
        step(2, opening + [4, 9], [6]),
        step(3, opening + [5, 9], [7]),
    ]
    merged = merge_steps(calls)
    assert (merged.threads, merged.splits, merged.merged_calls) == (2, 0, 2)
    assert sorted(s.call_ids for s in merged.sequences) == [
        ["call-0", "call-2"],
        ["call-1", "call-3"],
    ]


def test_a_named_thread_joins_only_its_own_name() -> None:
    first = step(0, [1, 2], [3])
    named = StepTokens(
        "call-1", 1, tokens.pack_token_ids([1, 2, 3, 4]), step(1, [], [5]).choices, 1, "worker"
    )
    named_again = StepTokens("call-2", 2, tokens.pack_token_ids([1, 2, 3, 4, 5, 6]), step(2, [], [7]).choices, 1,
                             "worker")  # fmt: skip
    merged = merge_steps([first, named, named_again])
    assert (merged.threads, merged.merged_calls, merged.splits) == (2, 1, 0)
    assert [(s.thread_id, s.call_ids) for s in merged.sequences] == [
        ("", ["call-0"]),
        ("worker", ["call-1", "call-2"]),
    ]


def test_past_the_open_thread_limit_the_least_recently_extended_thread_ends() -> None:
    calls = [step(i, [100 + i], [i]) for i in range(3)] + [
        step(3, [101, 1, 7], [8]),
        step(4, [100, 0, 7], [9]),
    ]
    merged = merge_steps(calls, max_open_threads=2)
    # Thread 0 ended when thread 2 opened; its next call finds it gone and opens a thread of its own.
    assert (merged.threads, merged.threads_ended_at_limit, merged.merged_calls) == (4, 2, 1)
    assert [s.call_ids for s in merged.sequences if len(s.call_ids) == 2] == [["call-1", "call-3"]]
    assert sorted(c for s in merged.sequences for c in s.call_ids) == [
        f"call-{i}" for i in range(5)
    ]


def test_interleaved_conversations_train_each_token_once() -> None:
    """The issue's shape: two conversations in one session, each re-sending its own history, 8 rounds."""
    histories = [[1, 2, 10], [1, 2, 20]]
    calls: list[StepTokens] = []
    for round_ in range(8):
        for thread, history in enumerate(histories):
            completion = [1000 + 10 * round_ + thread, 7]
            calls.append(step(len(calls), list(history), completion))
            history += completion + [3, 4]
    merged = merge_steps(calls)
    assert (merged.threads, merged.splits, merged.merged_calls) == (2, 0, 14)
    trained = sum(s.token_count for s in merged.sequences)
    assert trained == sum(len(h) - 2 for h in histories)


def test_max_open_threads_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_open_threads"):
        merge_steps([], max_open_threads=0)


def test_a_merge_repeats_nothing() -> None:
    first = step(0, [1, 2], [3, 4])
    merged = merge_steps([first, step(1, [1, 2, 3, 4, 5], [6])])
    assert (merged.splits, merged.repeated_tokens, dict(merged.split_reasons)) == (0, 0, {})

"""The console's trajectory view agrees with the assembler token for token: the same joins and
splits, every sampled token shown once, and the loss mask of the samples the assembler built."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.api.assembler.v1 import trajectory_pb2
from parity.api.common.v1 import llm_call_pb2
from parity.core import tokens
from parity.services.assembler.samples import LengthLimit, build_samples
from parity.services.assembler.trajectories import split_trajectories
from parity.services.console.views.token_text import TokenTexts
from parity.services.console.views.trajectory import MASK_UNKNOWN, build_trajectory

token_lists = st.lists(st.integers(0, 50_000), min_size=1, max_size=10)
NO_TOKENIZER = TokenTexts(None, "none in this test")


def call(
    index: int,
    prompt: list[int],
    completion: list[int],
    messages: list[dict] | None = None,
    **fields,
) -> llm_call_pb2.LlmCall:
    request = {"model": "m", "messages": messages or [{"role": "user", "content": "hi"}]}
    made = llm_call_pb2.LlmCall(call_id=f"c{index}", session_id="s", model="m", prompt_token_ids=tokens.pack_token_ids(prompt),
                                request_json=json.dumps(request).encode(), **fields)  # fmt: skip
    made.choices.add(index=0, token_ids=tokens.pack_token_ids(completion),
                     logprobs=tokens.pack_floats([-0.1 * (i + 1) for i in range(len(completion))]), finish_reason="stop")  # fmt: skip
    return made


def assembled(
    calls: list[llm_call_pb2.LlmCall], max_tokens: int = 0
) -> tuple[trajectory_pb2.Trajectory, int, int]:
    (trajectory,), _ = split_trajectories("s", calls, [])
    built = build_samples(trajectory, "s", "g", LengthLimit(max_tokens))
    return (
        trajectory_pb2.Trajectory(
            session_id="s",
            samples=built.samples,
            split_count=built.splits,
            thread_count=built.threads,
        ),
        built.splits,
        built.threads,
    )


@st.composite
def conversations(draw: st.DrawFn) -> list[llm_call_pb2.LlmCall]:
    """Each prompt extends its conversation's last prompt and reply, unless rewritten after its opening (a broken
    prefix); some calls open a conversation of their own (a subagent's), and conversations interleave."""
    openings = [[60_000 + t, *draw(token_lists)] for t in range(3)]
    prompts: list[list[int] | None] = [None, None, None]
    calls = []
    for index in range(draw(st.integers(1, 8))):
        thread = draw(st.integers(0, 2)) if index else 0
        prompt = prompts[thread]
        if prompt is None:
            prompt = openings[thread]
        elif draw(st.booleans()):
            prompt = [
                *openings[thread],
                61_000 + index,
                *draw(st.lists(st.integers(0, 1000), max_size=3)),
            ]
        completion = draw(token_lists)
        calls.append(call(index, prompt, completion))
        prompts[thread] = prompt + completion + draw(st.lists(st.integers(0, 1000), max_size=4))
    return calls


@settings(max_examples=200, deadline=None)
@given(conversations())
def test_joins_and_masks_match_the_assemblers_samples(calls: list[llm_call_pb2.LlmCall]) -> None:
    trajectory, splits, threads = assembled(calls)
    view = build_trajectory("", calls, trajectory, NO_TOKENIZER)
    kinds = [c.join.kind for c in view.calls]
    assert kinds[0] == "first" and kinds.count("split") == splits
    assert view.thread_count == threads == 1 + kinds.count("thread")
    # Each call is shown in the thread of the sample that holds it.
    thread_of = {c: s.thread_index for s in trajectory.samples for c in s.call_ids}
    assert [c.thread for c in view.calls] == [thread_of[c.call_id] for c in calls]
    sampled = [t for c in view.calls for choice in c.choices for t in choice.tokens]
    assert [t.id for t in sampled] == [
        i for c in calls for i in tokens.unpack_token_ids(c.choices[0].token_ids)
    ]
    assert all(t.mask == 1 for t in sampled)
    shown_prompts = [t for c in view.calls for t in c.prompt]
    assert all(t.mask == 0 for t in shown_prompts)
    assert sum(t.mask == 1 for t in sampled) == sum(
        int(tokens.unpack_mask(s.loss_mask).sum()) for s in trajectory.samples
    )
    for position, (current, shown) in enumerate(zip(calls, view.calls, strict=True)):
        if shown.join.kind == "merged":
            # It continues the last earlier call of its thread, past that call's prompt and reply.
            previous = next(c for c, v in zip(calls[position - 1 :: -1], view.calls[position - 1 :: -1], strict=True)
                            if v.thread == shown.thread)  # fmt: skip
            sequence = tokens.pack_token_ids(np.concatenate([tokens.unpack_token_ids(previous.prompt_token_ids),
                                                             tokens.unpack_token_ids(previous.choices[0].token_ids)]))  # fmt: skip
            assert (
                current.prompt_token_ids.startswith(sequence)
                and shown.join.shared == len(sequence) // 4
            )


def test_a_split_says_where_and_why_the_prefix_broke() -> None:
    first = call(0, [1, 2, 3], [10, 11, 12])
    rerendered = call(1, [1, 2, 3, 10, 99, 12, 5], [20])
    edited = call(2, [1, 2, 3, 7], [30])
    cut = call(3, [1, 2, 3, 7], [40])
    trajectory, _, _ = assembled([first, rerendered, edited, cut])
    view = build_trajectory("", [first, rerendered, edited, cut], trajectory, NO_TOKENIZER)
    joins = [c.join for c in view.calls]
    assert [j.kind for j in joins] == ["first", "split", "split", "split"]
    assert joins[1].shared == 4 and "previous reply came back re-rendered" in joins[1].detail
    assert "'[99]' (id 99) where the sequence had '[11]' (id 11)" in joins[1].detail
    assert view.calls[1].prompt[0].diverged and view.calls[1].prompt[0].id == 99
    assert joins[2].shared == 3 and "history before the previous reply changed" in joins[2].detail
    assert joins[3].shared == 4 and "the history was cut" in joins[3].detail


def test_tokens_past_a_truncated_sample_have_no_mask_and_tool_traffic_is_shown() -> None:
    tool_call = {
        "id": "call-1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"city": "rome"}'},
    }
    first = call(0, [1, 2], [3, 4, 5])
    first.choices[0].tool_calls_json = json.dumps([tool_call]).encode()
    history: list[dict[str, Any]] = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [tool_call]},
               {"role": "tool", "tool_call_id": "call-1", "content": "sunny"}]  # fmt: skip
    second = call(1, [1, 2, 3, 4, 5, 6], [7, 8], messages=history)
    trajectory, _, _ = assembled([first, second], max_tokens=7)
    view = build_trajectory("", [first, second], trajectory, NO_TOKENIZER)
    (tool,) = view.calls[0].choices[0].tool_calls
    assert (tool.name, json.loads(tool.arguments), tool.call_id) == (
        "lookup",
        {"city": "rome"},
        "call-1",
    )
    roles = [(m.role, m.name, m.content) for m in view.calls[1].messages]
    assert (
        roles[-1] == ("tool", "call-1", "sunny")
        and roles[0][0] == "assistant"
        and "lookup" in roles[0][2]
    )
    assert [t.mask for t in view.calls[1].choices[0].tokens] == [1, MASK_UNKNOWN]
    assert view.samples == [(7, 4, True)]


def test_the_history_mode_and_an_exact_history_fallback_are_shown() -> None:
    exact = llm_call_pb2.HISTORY_MODE_EXACT_HISTORY
    first = call(0, [1, 2, 3], [10, 11], history_mode=exact)
    edited = call(1, [1, 7], [20], history_mode=exact, history_fallback="history_changed")
    trajectory, _, _ = assembled([first, edited])
    view = build_trajectory("", [first, edited], trajectory, NO_TOKENIZER)
    assert view.history_mode == "exact history"
    assert [c.call.history_fallback for c in view.calls] == ["", "history_changed"]
    assert (
        build_trajectory("", [call(0, [1], [2])], None, NO_TOKENIZER).history_mode == "as deployed"
    )


def test_interleaved_threads_are_joined_each_on_its_own_and_named() -> None:
    orchestrator = [{"role": "user", "content": "plan"}]
    worker = [{"role": "user", "content": "research"}]
    reply = {"role": "assistant", "content": "ok"}
    calls = [
        call(0, [1, 2, 3], [10], messages=orchestrator),
        call(1, [1, 2, 4], [20], messages=worker, thread_id="researcher"),
        call(2, [1, 2, 3, 10, 5], [11], messages=[*orchestrator, reply, {"role": "user", "content": "next"}]),
        call(3, [1, 2, 4, 20, 6], [21], messages=[*worker, reply, {"role": "user", "content": "more"}],
             thread_id="researcher"),
    ]  # fmt: skip
    trajectory, splits, threads = assembled(calls)
    view = build_trajectory("", calls, trajectory, NO_TOKENIZER)
    assert (splits, threads, view.thread_names) == (0, 2, ["", "researcher"])
    assert [(c.join.kind, c.thread, c.join.shared) for c in view.calls] == [
        ("first", 0, 0),
        ("thread", 1, 0),
        ("merged", 0, 4),
        ("merged", 1, 4),
    ]
    assert "thread 2 'researcher'" in view.calls[3].join.summary
    # Each call lists what its own thread's conversation added, not the other thread's messages.
    assert [m.content for m in view.calls[3].messages] == ["more"]
    assert view.threads == [(1, "", 2, 2), (2, "researcher", 2, 2)]

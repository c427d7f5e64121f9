"""Which requests continue a trajectory's last call in exact_history, why the others do not, and the token budget."""

from __future__ import annotations

import pytest

from parity.services.ingest.history.history_book import (
    HISTORY_CHANGED,
    NO_NEW_TURNS,
    REPLY_CHANGED,
    REQUEST_CHANGED,
    Continuation,
    HistoryBook,
)

KEY = ("session-1", "", "")
QUESTION = {"role": "user", "content": "What is 2 plus 3?"}
REPLY = {"role": "assistant", "content": "<think>add</think>",
         "tool_calls": [{"id": "call-1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]}  # fmt: skip
RESULT = {"role": "tool", "tool_call_id": "call-1", "content": "5"}
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


def book_with_one_call(budget: int = 1000) -> HistoryBook:
    book = HistoryBook(budget)
    book.remember(KEY, {"messages": [QUESTION], "tools": TOOLS}, REPLY, [1, 2, 3, 4])
    return book


def test_a_request_that_sends_the_reply_back_and_adds_turns_continues_the_exact_ids() -> None:
    found = book_with_one_call().continuation(
        KEY, {"messages": [QUESTION, REPLY, RESULT], "tools": TOOLS}
    )
    assert isinstance(found, Continuation)
    assert found.sequence.tolist() == [1, 2, 3, 4] and found.new_messages == [RESULT]


def test_the_reply_is_compared_as_the_template_sees_it_not_as_an_sdk_echoes_it() -> None:
    echoed = REPLY | {"refusal": None, "annotations": [], "reasoning_content": "add",
                      "tool_calls": [{"id": "other-id", "type": "function",
                                      "function": {"name": "add", "arguments": '{"b":3,"a":2}'}}]}  # fmt: skip
    found = book_with_one_call().continuation(
        KEY, {"messages": [QUESTION, echoed, RESULT], "tools": TOOLS}
    )
    assert isinstance(found, Continuation)


@pytest.mark.parametrize(("messages", "tools", "reason"), [
    ([QUESTION, RESULT, REPLY, RESULT], TOOLS, REPLY_CHANGED),
    ([QUESTION, REPLY | {"content": "<think>sum</think>"}, RESULT], TOOLS, REPLY_CHANGED),
    ([QUESTION, {"role": "user", "content": "Hello"}, RESULT], TOOLS, REPLY_CHANGED),
    ([QUESTION, REPLY, RESULT], None, REQUEST_CHANGED),
    ([QUESTION, REPLY], TOOLS, NO_NEW_TURNS),
])  # fmt: skip
def test_a_request_that_does_not_continue_says_why(
    messages: list, tools: list | None, reason: str
) -> None:
    assert book_with_one_call().continuation(KEY, {"messages": messages, "tools": tools}) == reason


def test_an_edit_after_the_opening_is_a_changed_history() -> None:
    book = book_with_one_call()
    book.remember(
        KEY, {"messages": [QUESTION, REPLY, RESULT], "tools": TOOLS}, REPLY, [1, 2, 3, 4, 5, 6]
    )
    edited = {"role": "tool", "tool_call_id": "call-1", "content": "6"}
    assert (
        book.continuation(
            KEY, {"messages": [QUESTION, REPLY, edited, REPLY, RESULT], "tools": TOOLS}
        )
        == HISTORY_CHANGED
    )


def test_an_unknown_trajectory_thread_or_conversation_has_no_continuation_and_no_reason() -> None:
    assert (
        book_with_one_call().continuation(
            ("session-2", "", ""), {"messages": [QUESTION, REPLY, RESULT]}
        )
        is None
    )
    assert (
        book_with_one_call().continuation(
            ("session-1", "judge", ""), {"messages": [QUESTION, REPLY, RESULT]}
        )
        is None
    )
    assert (
        book_with_one_call().continuation(
            ("session-1", "", "worker"), {"messages": [QUESTION, REPLY, RESULT]}
        )
        is None
    )
    # Another opening: a conversation of its own (a subagent's first call), not an edit of the known one.
    other = {"role": "user", "content": "What is 2 plus 4?"}
    assert (
        book_with_one_call().continuation(KEY, {"messages": [other, REPLY, RESULT], "tools": TOOLS})
        is None
    )
    assert (
        book_with_one_call().continuation(KEY, {"messages": [REPLY, RESULT], "tools": TOOLS})
        is None
    )


def test_interleaved_conversations_each_continue_their_own_last_call() -> None:
    """An orchestrator and a worker in one trajectory, their calls alternating."""
    book = HistoryBook(1000)
    task = {"role": "user", "content": "Plan the sum."}
    book.remember(KEY, {"messages": [task], "tools": TOOLS}, REPLY, [1, 2])
    book.remember(KEY, {"messages": [QUESTION], "tools": TOOLS}, REPLY, [3, 4])
    assert book.conversations == 2
    orchestrator = book.continuation(KEY, {"messages": [task, REPLY, RESULT], "tools": TOOLS})
    worker = book.continuation(KEY, {"messages": [QUESTION, REPLY, RESULT], "tools": TOOLS})
    assert isinstance(orchestrator, Continuation) and orchestrator.sequence.tolist() == [1, 2]
    assert isinstance(worker, Continuation) and worker.sequence.tolist() == [3, 4]
    # The orchestrator's next call replaces its own last call, not the worker's.
    book.remember(KEY, {"messages": [task, REPLY, RESULT], "tools": TOOLS}, REPLY, [1, 2, 5, 6])
    assert book.conversations == 2
    again = book.continuation(
        KEY, {"messages": [task, REPLY, RESULT, REPLY, RESULT], "tools": TOOLS}
    )
    assert isinstance(again, Continuation) and again.sequence.tolist() == [1, 2, 5, 6]


def test_two_conversations_with_one_opening_each_continue_by_their_reply() -> None:
    book = HistoryBook(1000)
    other_reply = {"role": "assistant", "content": "5"}
    book.remember(KEY, {"messages": [QUESTION]}, REPLY, [1, 2])
    book.remember(KEY, {"messages": [QUESTION]}, other_reply, [1, 3])
    first = book.continuation(KEY, {"messages": [QUESTION, REPLY, RESULT]})
    second = book.continuation(KEY, {"messages": [QUESTION, other_reply, RESULT]})
    assert isinstance(first, Continuation) and first.sequence.tolist() == [1, 2]
    assert isinstance(second, Continuation) and second.sequence.tolist() == [1, 3]


def test_conversations_per_trajectory_are_bounded() -> None:
    book = HistoryBook(1000, max_conversations=2)
    for n in range(3):
        book.remember(KEY, {"messages": [{"role": "user", "content": str(n)}]}, REPLY, [n])
    assert book.conversations == 2
    assert (
        book.continuation(KEY, {"messages": [{"role": "user", "content": "0"}, REPLY, RESULT]})
        is None
    )


def test_the_least_recently_used_trajectories_go_first_when_the_budget_is_spent() -> None:
    book = HistoryBook(10)
    for n in range(3):
        book.remember((f"s{n}", "", ""), {"messages": [QUESTION]}, REPLY, [n] * 4)
    # s0 went when s2 came (12 tokens > 10); s1 stays.
    assert book.trajectories == 2
    assert book.continuation(("s0", "", ""), {"messages": [QUESTION, REPLY, RESULT]}) is None
    assert isinstance(
        book.continuation(("s1", "", ""), {"messages": [QUESTION, REPLY, RESULT]}), Continuation
    )
    book.remember(("s1", "", ""), {"messages": [QUESTION, REPLY, RESULT]}, REPLY, [7] * 7)
    assert (
        book.trajectories == 1
        and book.continuation(("s2", "", ""), {"messages": [QUESTION, REPLY, RESULT]}) is None
    )

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any, cast

import httpx
import pytest

import parity
from parity.chat_client import _route
from parity.core import session_slug
from parity.core.session_slug import SessionRef


def current() -> SessionRef:
    """The current session, which every caller here has opened."""
    ref = parity.current_session()
    assert ref is not None
    return ref


def with_view(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function.with_view`: @parity.trajectory declares the function's own type, so that calls and methods
    type-check, and that type has no with_view."""
    return cast(Any, function).with_view


def test_sessions_nest_with_parent_chain_and_merged_metadata() -> None:
    assert parity.current_session() is None
    with parity.session("outer", task="t1", split="train") as outer:
        with parity.session(task="t2", trajectory="judge") as inner:
            assert inner.parent_session_ids == ("outer",)
            assert inner.metadata == {"task": "t2", "split": "train"}
            assert inner.trajectory_name == "judge"
            assert parity.current_session() == inner
        assert parity.current_session() == outer
    assert parity.current_session() is None


def test_nested_sessions_inherit_the_end_user_and_add_tags() -> None:
    with parity.session(user="user-1", tags=["prod"]) as outer:
        with parity.session(tags=["checkout", "prod"]) as inner:
            assert (inner.end_user_id, inner.tags) == ("user-1", ("checkout", "prod"))
        with parity.session(user="user-2") as other:
            assert (other.end_user_id, other.tags) == ("user-2", ("prod",))
    assert (outer.end_user_id, outer.tags) == ("user-1", ("prod",))
    with pytest.raises(ValueError, match="user 'a.nb' contains a control character"):
        parity.session(user="a\nb")
    with pytest.raises(ValueError, match="must be a list of tags, not one string"):
        parity.session(tags="prod")


def test_each_session_gets_a_unique_id() -> None:
    ids = set()
    for _ in range(100):
        with parity.session() as ref:
            ids.add(ref.session_id)
    assert len(ids) == 100


async def test_concurrent_tasks_keep_their_own_sessions() -> None:
    async def rollout(index: int) -> str:
        async with parity.session(f"s{index}"):
            await asyncio.sleep(0.001 * (index % 5))
            return current().session_id

    assert await asyncio.gather(*(rollout(i) for i in range(200))) == [f"s{i}" for i in range(200)]


def test_threads_see_the_session_when_given_the_context() -> None:
    seen = []
    with parity.session("threaded"):
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=context.run, args=(lambda: seen.append(current().session_id),)
        )
        thread.start()
        thread.join()
    assert seen == ["threaded"]


def test_trajectory_names_the_calls_inside_and_keeps_the_return_value() -> None:
    @parity.trajectory(name="solver")
    def solve(x: int) -> int:
        return x * 2 if current().trajectory_name == "solver" else -1

    with parity.session("episode"):
        assert solve(21) == 42
        result, view = with_view(solve)(1)
        assert (result, view.session_id, view.name) == (2, "episode", "solver")
    _, standalone = with_view(solve)(1)
    assert standalone.session_id != "episode", "outside a session a fresh one is opened"


async def test_async_trajectories_and_methods() -> None:
    class Agent:
        @parity.trajectory
        async def judge(self, answer: str) -> str:
            return f"{answer}:{current().trajectory_name}"

    async with parity.session("e1"):
        assert await Agent().judge("a") == "a:judge"
        result, view = await with_view(Agent.judge)(Agent(), "b")
        assert (result, view.name) == ("b:judge", "judge")


def test_session_url_and_request_routing_carry_the_current_session() -> None:
    assert parity.session_url("http://ingest:8000") == "http://ingest:8000/v1"
    with parity.session("root"), parity.session("leaf", task="t"):
        url = parity.session_url("http://ingest:8000")
        slug = url.split("/sessions/")[1].split("/v1")[0]
        assert session_slug.decode(slug) == parity.SessionRef("leaf", ("root",), "", {"task": "t"})
        request = httpx.Request("POST", "http://ingest:8000/v1/chat/completions")
        _route(request)
        assert request.url.path == f"/sessions/{slug}/v1/chat/completions"
        # Anthropic clients append /v1/messages to the base URL themselves.
        assert (
            parity.session_url("http://ingest:8000", api="anthropic")
            == f"http://ingest:8000/sessions/{slug}"
        )
    assert parity.session_url("http://ingest:8000", api="anthropic") == "http://ingest:8000"
    with pytest.raises(ValueError, match="api must be one of openai, anthropic"):
        parity.session_url("http://ingest:8000", api="gemini")
    outside = httpx.Request("POST", "http://ingest:8000/v1/chat/completions")
    _route(outside)
    assert outside.url.path == "/v1/chat/completions"


def test_reward_outside_a_session_is_an_error_not_a_silent_drop() -> None:
    with pytest.raises(RuntimeError, match="needs an active session"):
        parity.reward(1.0)
    with parity.session("s"), pytest.raises(ValueError, match="finite"):
        parity.reward(float("nan"))


async def test_a_thread_names_the_calls_inside_it_and_keeps_the_session() -> None:
    with parity.session("episode", task="t1") as outer:
        with parity.thread("researcher") as worker:
            assert (worker.session_id, worker.thread_id, worker.metadata) == (
                "episode",
                "researcher",
                outer.metadata,
            )
            assert (
                session_slug.decode(parity.session_url("http://ingest").split("/")[-2]).thread_id
                == "researcher"
            )
        async with parity.thread("writer") as writer:
            assert writer.thread_id == "writer"
        assert parity.current_session() == outer and outer.thread_id == ""
    with pytest.raises(RuntimeError, match="needs an active session"), parity.thread("researcher"):
        pass
    with pytest.raises(ValueError, match="needs a name"):
        parity.thread("")
    with (
        parity.session("episode"),
        pytest.raises(ValueError, match="thread_id 'a.nb' contains a control character"),
    ):
        parity.thread("a\nb").__enter__()

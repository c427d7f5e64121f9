"""The agent engine against the real stack: failures and timeouts are recorded, retried, closed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Generator

import pytest

import parity
from parity import engine
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import StoreClient

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]
CLOSED, SUCCEEDED, FAILED, TIMED_OUT = 2, 1, 2, 3


def test_failures_and_timeouts_are_recorded_retried_and_closed(full_stack, vllm_server) -> None:
    client = parity.get_async_chat_client()
    attempts: dict[str, int] = {}

    async def flaky(task: dict) -> float:
        await client.chat.completions.create(model=vllm_server.model_name, max_tokens=2,
                                             messages=[{"role": "user", "content": task["id"]}])  # fmt: skip
        session = parity.current_session()
        assert session is not None  # the engine runs each attempt in a session
        key = session.session_id.rsplit("-a", 1)[0]
        attempts[key] = attempts.get(key, 0) + 1
        if task["id"] == "always-fails":
            raise RuntimeError("tool crashed")
        if task["id"] == "slow" and attempts[key] == 1:
            await asyncio.sleep(30)
        if task["id"] == "bad-reward":
            return "great"  # type: ignore[return-value]
        return 0.5

    tasks = [{"id": "fine"}, {"id": "always-fails"}, {"id": "slow"}, {"id": "bad-reward"}]
    # A freshly started vLLM's first answer can take longer than the 4 s the agents get.
    parity.get_chat_client().chat.completions.create(model=vllm_server.model_name, max_tokens=2,
                                                     messages=[{"role": "user", "content": "warm up"}])  # fmt: skip
    results = engine.run(
        flaky, tasks, rollouts_per_task=1, timeout_s=4, retries=1, progress=False, run_id="eng"
    )
    by_session = {r.session_id: r for r in results}
    assert (
        by_session["eng-fine-r0-a0"].outcome == "succeeded"
        and by_session["eng-fine-r0-a0"].reward == 0.5
    )
    assert [by_session[f"eng-always-fails-r0-a{i}"].outcome for i in (0, 1)] == ["failed", "failed"]
    assert "tool crashed" in by_session["eng-always-fails-r0-a0"].error
    assert (by_session["eng-slow-r0-a0"].outcome, by_session["eng-slow-r0-a1"].outcome) == (
        "timed_out",
        "succeeded",
    )
    assert (
        by_session["eng-bad-reward-r0-a0"].outcome == "failed"
        and "float reward" in by_session["eng-bad-reward-r0-a0"].error
    )
    store = StoreClient(full_stack.store.address)
    expected = {
        "eng-fine-r0-a0": SUCCEEDED,
        "eng-always-fails-r0-a1": FAILED,
        "eng-slow-r0-a0": TIMED_OUT,
        "eng-slow-r0-a1": SUCCEEDED,
    }
    for session_id, outcome in expected.items():
        session = store.get_session(store_pb.GetSessionRequest(session_id=session_id)).session
        assert (session.state, session.outcome) == (CLOSED, outcome), session_id
    # The retry closes first: between the two closes, the assembler must see the episode's outcome, not its failure.
    closes = [s for s in closed_in_order(store) if s.startswith("eng-slow-")]
    assert closes == ["eng-slow-r0-a1", "eng-slow-r0-a0"]


def closed_in_order(store: StoreClient) -> list[str]:
    """Every session closed so far, in the store's close order."""
    request, closed = store_pb.WatchClosedSessionsRequest(max_batch_size=1000), []
    stream = store.watch_closed_sessions(request, timeout_s=60)
    for page in stream:
        closed += [session.session_id for session in page.sessions]
        if len(page.sessions) < request.max_batch_size:
            assert isinstance(
                stream, Generator
            )  # the client's server streams are generators: close() ends the call
            stream.close()
            return closed
    raise AssertionError("the close feed ended before catching up")


def test_sync_agents_run_as_many_at_once_as_concurrency_allows(full_stack) -> None:
    # More than asyncio's default executor has threads on any machine (at most 32).
    concurrency = 40
    together = threading.Barrier(concurrency, timeout=60)

    def agent(task: dict) -> float:
        together.wait()  # breaks, failing every rollout, unless all of them run at once
        return 1.0

    tasks = [{"id": f"together-{n}"} for n in range(concurrency)]
    results = engine.run(
        agent, tasks, rollouts_per_task=1, concurrency=concurrency, retries=0, progress=False
    )
    assert [r.outcome for r in results] == ["succeeded"] * concurrency, {r.error for r in results}

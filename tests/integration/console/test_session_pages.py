"""A session's page: a tool-using rollout's every token with its logprob and loss mask, interleaved threads side by
side, and agent text shown as text that never runs."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

import parity
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.common.v1 import session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import AssemblerClient, StoreClient
from parity.core import tokens
from parity.services.console.views.format import number
from tests.integration.console.hostile_text import XSS, XSS_TASK
from tests.integration.console.page_tables import rows

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]


def test_a_tool_using_trajectory_shows_every_token_its_logprob_and_its_loss_mask(
    console, trained, deployed_stack, page, screenshots
) -> None:
    store = StoreClient(deployed_stack.store.address)
    sessions = store.list_sessions(store_pb.ListSessionsRequest(
        page_size=200, metadata={"parity.run_id": trained.run_id}, order=store_pb.SESSION_ORDER_NEWEST_FIRST)).sessions  # fmt: skip
    tooled = None
    for session in sessions:
        calls = store.list_calls(
            store_pb.ListCallsRequest(session_id=session.session_id, view=store_pb.CALL_VIEW_FULL)
        ).calls
        if (
            len(calls) == 2
            and calls[0].choices[0].tool_calls_json
            and session.metadata.get("parity.validation") != "true"
        ):
            tooled = session
            break
    assert tooled is not None, "no rollout got a parsed tool call"
    trajectory = AssemblerClient(deployed_stack.assembler.address).get_trajectory(assembler_pb.GetTrajectoryRequest(
        session_id=tooled.session_id, view=assembler_pb.TRAJECTORY_VIEW_FULL)).trajectory  # fmt: skip
    (reward,) = store.list_rewards(
        store_pb.ListRewardsRequest(session_id=tooled.session_id)
    ).rewards

    page.goto(f"{console.url}/sessions/{tooled.session_id}", wait_until="load")
    assert page.errors == []
    assert page.locator("section.call").count() == 2
    sampled = page.locator(".tokens.sampled .tk")
    assert sampled.count() == sum(len(c.choices[0].token_ids) // 4 for c in calls)
    assert page.locator(".trajectory .tk.m1").count() == sum(
        int(tokens.unpack_mask(s.loss_mask).sum()) for s in trajectory.samples
    )
    assert number(reward.value) in page.inner_text(".trajectory .facts")
    # Whatever JSON the random model's arguments are, they are shown, pretty-printed.
    arguments = json.loads(
        json.loads(calls[0].choices[0].tool_calls_json)[0]["function"]["arguments"]
    )
    shown = " ".join(page.inner_text(".toolcall").split())
    assert (
        "tool call lookup" in shown
        and " ".join(json.dumps(arguments, indent=2, ensure_ascii=False).split()) in shown
    )
    assert "sunny and calm" in page.inner_text(".msg.tool")
    join = page.locator("section.call").nth(1).locator(".join").inner_text()
    assert ("continues the sequence" in join) == (trajectory.split_count == 0)
    if trajectory.split_count:
        assert "the previous reply came back re-rendered" in join, join

    # Hovering a sampled token shows the id and logprob vLLM reported for it.
    first_choice = calls[0].choices[0]
    page.locator(".tokens.sampled .tk").first.hover()
    tip = page.inner_text("#token-tip")
    assert f"id {tokens.unpack_token_ids(first_choice.token_ids)[0]}" in tip
    assert (
        f"logprob {tokens.unpack_floats(first_choice.logprobs)[0]:.4f}" in tip
        and "loss mask 1" in tip
    )
    box = page.locator(".tokens.sampled").first.bounding_box()
    screenshots(
        page,
        "token-hover",
        clip={"x": 0, "y": max(0, box["y"] - 140), "width": 1400, "height": 300},
    )
    page.mouse.move(0, 0)
    screenshots(page, "trajectory", full_page=True)
    page.check("input[value=mask]")
    second = page.locator("section.call").nth(1)
    second.scroll_into_view_if_needed()
    screenshots(second, "trajectory-mask")


def test_agent_text_is_shown_as_text_and_never_runs(
    console, deployed_stack, sdk_on_stack, page
) -> None:
    session_id = "xss-session"
    client = parity.get_chat_client()
    with parity.session(session_id, task=XSS_TASK):
        client.chat.completions.create(model="tiny", max_tokens=4, messages=[
            {"role": "user", "content": XSS}, {"role": "assistant", "content": "ok"},
            {"role": "tool", "tool_call_id": "c1", "content": "<iframe src=\"javascript:window.__pwned = 4\"></iframe>"},
        ])  # fmt: skip
    parity.flush()
    AssemblerClient(deployed_stack.assembler.address).close_session(
        assembler_pb.CloseSessionRequest(session_id=session_id, outcome=session_pb2.SESSION_OUTCOME_FAILED,
                                         error_message=XSS))  # fmt: skip
    for path in (f"/sessions/{session_id}", f"/sessions?{urlencode({'task': XSS_TASK})}"):
        page.goto(f"{console.url}{path}", wait_until="load")
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert (
            page.locator(
                "main img, main iframe, main script, [onerror], [onmouseover], b:text-is('bold')"
            ).count()
            == 0
        )
    assert XSS_TASK in page.inner_text("#session-rows")
    page.goto(f"{console.url}/sessions/{session_id}", wait_until="load")
    assert XSS in page.inner_text(".msg.user") and XSS in page.inner_text(".banner.error")
    assert XSS_TASK in page.inner_text(".facts") and "javascript:" in page.inner_text(".msg.tool")
    assert page.errors == []


def test_a_session_of_interleaved_threads_shows_them_side_by_side(
    console, deployed_stack, page, screenshots
) -> None:
    """An orchestrator and a named researcher, their calls alternating in one session, exactly as an agent that
    runs a subagent makes them: one column per thread, each call in its own."""
    session_id = f"threads-{int(time.time())}"
    base = f"http://127.0.0.1:{deployed_stack.http_port}/sessions/{session_id}/v1"
    orchestrator = openai.OpenAI(base_url=base, api_key="unused")
    researcher = openai.OpenAI(
        base_url=base, api_key="unused", default_headers={"X-Parity-Thread": "researcher"}
    )
    histories: dict[openai.OpenAI, list[ChatCompletionMessageParam]] = {orchestrator: [{"role": "user", "content": "Plan the trip."}],
                 researcher: [{"role": "user", "content": "Find a sunny city."}]}  # fmt: skip
    for _ in range(2):
        for client, messages in histories.items():
            reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=4)
            messages += [{"role": "assistant", "content": reply.choices[0].message.content or ""},
                         {"role": "user", "content": "Go on."}]  # fmt: skip
    calls = (
        StoreClient(deployed_stack.store.address)
        .list_calls(store_pb.ListCallsRequest(session_id=session_id, view=store_pb.CALL_VIEW_FULL))
        .calls
    )
    assert [c.thread_id for c in calls] == ["", "researcher", "", "researcher"]

    page.goto(f"{console.url}/sessions/{session_id}", wait_until="load")
    assert page.errors == []
    assert rows(page, ".threads-table tbody tr") == [["1", "–", "2", str(sum(len(c.choices[0].token_ids) // 4 for c in calls[::2]))],
                                                    ["2", "researcher", "2", str(sum(len(c.choices[0].token_ids) // 4 for c in calls[1::2]))]]  # fmt: skip
    columns = page.eval_on_selector_all(
        ".threads.n2 > section.call",
        "cs => cs.map(c => [c.className, c.getBoundingClientRect().x])",
    )
    assert [c.split()[-1] for c, _ in columns] == ["col1", "col2", "col1", "col2"]
    # Side by side: the second thread's calls sit to the right of the first's.
    assert (
        columns[1][1] > columns[0][1]
        and columns[3][1] > columns[2][1]
        and columns[0][1] == columns[2][1]
    )
    assert (
        "opens thread 2 'researcher'"
        in page.locator("section.call").nth(1).locator(".join").inner_text()
    )
    screenshots(page, "threads", full_page=True)

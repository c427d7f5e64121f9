"""The console in a real browser, against a deployed stack after a short real training run of a
two-turn agent that calls a tool: the run page, a batch and a trajectory show what the services
recorded, new sessions appear live, production sessions are found by end user and tag and show
their feedback, agent text never runs, and failures read as pages."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

import parity
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.common.v1 import reward_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import AssemblerClient, StoreClient, TrainerClient
from parity.core import tokens
from parity.services.console.views.format import number
from tests.call_factory import make_call
from tests.conftest import free_port
from tests.integration.openai_api import as_messages, sampled_logprobs

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

TASKS = [{"id": f"t{n}", "prompt": prompt} for n, prompt in enumerate(
    ["Where is it sunny?", "Pick a city for the trip.", "Which place is calm?", "Say where to sail."])]  # fmt: skip
VAL_TASKS = [{"id": "v0", "prompt": "Choose a harbour."}]
TOOLS: list[ChatCompletionToolParam] = [{"type": "function", "function": {
    "name": "lookup", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["rome", "oslo"]}},
                   "required": ["city"]},
}}]  # fmt: skip
XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
XSS_TASK = 'x" onmouseover="window.__pwned = 3" <b>bold</b>'


async def tool_agent(task: dict[str, Any]) -> float:
    """Asks, gets a tool call (forced, as an agent framework would), runs the tool, and asks again with
    the same tools offered, so the prompt keeps its prefix and only the reply's re-rendering can break it."""
    client = parity.get_async_chat_client()
    sampling: dict[str, Any] = {
        "model": task["model"],
        "max_tokens": task["max_tokens"],
        "temperature": task["temperature"],
    }
    messages: list[dict[str, Any]] = [{"role": "user", "content": task["prompt"]}]
    first = await client.chat.completions.create(
        messages=as_messages(messages),
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "lookup"}},
        **sampling,
    )
    calls = first.choices[0].message.tool_calls or []
    if calls:
        messages += [{"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]},
                     {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny and calm"}]  # fmt: skip
    else:
        # A random model's arguments do not always parse; the agent goes on without the tool.
        messages += [{"role": "assistant", "content": first.choices[0].message.content or ""},
                     {"role": "user", "content": "The lookup failed; answer anyway."}]  # fmt: skip
    second = await client.chat.completions.create(messages=as_messages(messages), tools=TOOLS, tool_choice="none",
                                                  logprobs=True, **sampling)  # fmt: skip
    words = [entry.token for entry in sampled_logprobs(second.choices[0])]
    return 0.5 * bool(calls) + 0.5 * sum(w.startswith(" ") for w in words) / max(1, len(words))


@pytest.fixture(scope="module")
def trained(deployed_stack, tmp_path_factory):
    result = parity.train(
        tool_agent, TASKS, val_tasks=VAL_TASKS, model=deployed_stack.vllm.config.model_path,
        stack=deployed_stack.addresses, steps=3, groups_per_batch=2, rollouts_per_task=4, max_tokens=24,
        learning_rate=3e-3, val_samples=2, output_dir=str(tmp_path_factory.mktemp("runs")), progress=False,
    )  # fmt: skip
    assert result.state == "completed", result.error
    return result


@pytest.fixture(scope="module")
def sdk_on_stack(deployed_stack, trained):
    """After the run (which restores the SDK's settings), point the SDK at the stack for the tests' own agents."""
    previous = parity.current_config()
    parity.configure(ingest_url=deployed_stack.addresses.ingest_url, assembler_address=deployed_stack.assembler.address,
                     store_address=deployed_stack.store.address)  # fmt: skip
    yield
    parity.configure(
        **{k: getattr(previous, k) for k in ("ingest_url", "assembler_address", "store_address")}
    )


@pytest.fixture(scope="module")
def console(deployed_stack, start_console, trained):
    return start_console("--store-address", deployed_stack.store.address, "--assembler-address",
                         deployed_stack.assembler.address, "--trainer-address", deployed_stack.trainer.address)  # fmt: skip


def rows(page, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        selector, "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))"
    )


def test_the_run_page_shows_its_steps_rewards_validation_and_curves(
    console, trained, deployed_stack, page, screenshots
) -> None:
    trainer = TrainerClient(deployed_stack.trainer.address)
    steps = trainer.list_run_metrics(
        trainer_pb.ListRunMetricsRequest(run_id=trained.run_id)
    ).metrics
    validations = trainer.list_run_metrics(trainer_pb.ListRunMetricsRequest(
        run_id=trained.run_id, kind=trainer_pb.METRICS_KIND_VALIDATION)).metrics  # fmt: skip
    assert [v.step for v in validations] == [0, 3], (
        "parity train records each validation with the trainer"
    )

    page.goto(f"{console.url}/runs", wait_until="load")
    assert trained.run_id in page.inner_text("table")
    page.click(f"text={trained.run_id}")
    page.wait_for_url(f"**/runs/{trained.run_id}")
    assert "completed" in page.inner_text(".facts") and "3 / 3" in page.inner_text(".facts")
    table = {row[0]: row for row in rows(page, "h2:text('Steps') + .table-wrap tbody tr")}
    assert set(table) == {"step 1", "step 2", "step 3"}
    for metrics in steps:
        row = table[f"step {metrics.step}"]
        assert row[2] == number(metrics.values["reward_mean"]) and row[-1] == number(
            validations[-1].values["reward"] if metrics.step == 3 else None
        )
    assert page.locator(".chart path.line").count() >= 4
    assert page.locator(".chart").first.locator("circle").count() == 2, (
        "validation before and after training"
    )
    assert page.errors == []
    screenshots(page, "run", full_page=True)


def test_a_batch_shows_each_rollouts_reward_advantage_outcome_and_the_filters(
    console, trained, deployed_stack, page, screenshots
) -> None:
    batch = TrainerClient(deployed_stack.trainer.address).get_step_batch(
        trainer_pb.GetStepBatchRequest(run_id=trained.run_id, step=1)).batch  # fmt: skip
    page.goto(f"{console.url}/runs/{trained.run_id}/steps/1", wait_until="load")
    assert batch.batch_id in page.inner_text(".facts")
    shown = {session: row for session, row in zip(
        page.eval_on_selector_all("table.rollouts tbody tr td:first-child a", "links => links.map(a => a.title)"),
        rows(page, "table.rollouts tbody tr"), strict=True)}  # fmt: skip
    for sample in batch.samples:
        row = shown[sample.session_id]
        assert row[1] == "succeeded" and row[2] == "trained"
        assert row[3] == number(sample.reward) and row[5] == f"{sample.advantage:+.4f}"
    assert {session for session, r in shown.items() if r[2] == "trained"} == {
        s.session_id for s in batch.samples
    }
    groups = page.locator(".group h3").all_inner_texts()
    assert all(any(group_id in text for text in groups) for group_id in batch.group_ids)
    filters = {row[0]: int(row[1]) for row in rows(page, ".filters-table tbody tr")}
    assert filters == dict(batch.stats.filtered_counts)
    screenshots(page, "batch", full_page=True)


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


def test_sessions_are_filtered_and_new_ones_appear_without_a_reload(
    console, trained, deployed_stack, page, screenshots
) -> None:
    page.goto(f"{console.url}/sessions?run={trained.run_id}&reward_min=0.5", wait_until="load")
    listed = rows(page, "#session-rows tbody tr")
    assert listed and all(row[2] == trained.run_id and float(row[7]) >= 0.5 for row in listed)
    page.goto(f"{console.url}/sessions", wait_until="load")
    page.evaluate("window.__not_reloaded = true")
    page.wait_for_timeout(1000)
    session_id = f"live-{int(time.time())}"
    agent = openai.OpenAI(
        base_url=f"http://127.0.0.1:{deployed_stack.http_port}/sessions/{session_id}/v1",
        api_key="unused",
    )
    agent.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=4
    )
    page.wait_for_selector(f"#session-rows a:text-is('{session_id}')", timeout=20_000)
    assert page.evaluate("window.__not_reloaded") is True
    screenshots(page, "sessions")


def test_production_sessions_are_found_by_end_user_and_tag_and_show_their_feedback(
    console, deployed_stack, page, screenshots
) -> None:
    stamp = time.time_ns()
    user, other, tag = f"acct-{stamp}", f"acct-{stamp}-b", f"checkout-{stamp}"
    evil_user, evil_tag = f"{XSS[:40]}-{stamp}", f"<b>bold</b>-{stamp}"
    attributed = {f"prod-{stamp}-0": (user, [tag, "prod"]), f"prod-{stamp}-1": (user, ["prod"]),
                  f"prod-{stamp}-2": (other, [tag, "beta"]), f"prod-{stamp}-3": (evil_user, [tag, evil_tag])}  # fmt: skip
    first = f"prod-{stamp}-0"
    calls = []
    for session_id, (end_user, tags) in attributed.items():
        call = make_call(f"{session_id}-c0", session_id, [1, 2, 3], [[4, 5]])
        call.end_user_id = end_user
        call.tags.extend(sorted(tags))
        calls.append(call)
    store = StoreClient(deployed_stack.store.address)
    store.write_calls(store_pb.WriteCallsRequest(calls=calls))
    trajectory, step = reward_pb2.REWARD_LEVEL_TRAJECTORY, reward_pb2.REWARD_LEVEL_STEP
    store.write_rewards(store_pb.WriteRewardsRequest(rewards=[
        reward_pb2.Reward(reward_id=f"{first}-sdk", session_id=first, level=trajectory, value=0.25, source="sdk"),
        reward_pb2.Reward(reward_id=f"{first}-up", session_id=first, level=trajectory, value=1.0, source="feedback",
                          name="thumbs_up"),
        reward_pb2.Reward(reward_id=f"{first}-down", session_id=first, level=step, call_id=f"{first}-c0", value=-1.0,
                          source="feedback", name="thumbs_down"),
    ]))  # fmt: skip

    def listed() -> dict[str, list[str]]:
        return {row[0]: row for row in rows(page, "#session-rows tbody tr")}

    page.goto(f"{console.url}/sessions?{urlencode({'user': user})}", wait_until="load")
    shown = listed()
    assert set(shown) == {first, f"prod-{stamp}-1"}
    assert shown[first][4] == user and shown[first][5].split() == [tag, "prod"]
    assert shown[first][7] == "1.25", (
        "the session's reward sums its feedback, as the assembler does"
    )
    # A tag of a row narrows the list to it; a user of a row filters by that user.
    page.locator(f"#session-rows tr:has(a:text-is('{first}')) a.tag:text-is('{tag}')").click()
    page.wait_for_url("**tag=*")
    assert set(listed()) == {first}
    page.goto(f"{console.url}/sessions?{urlencode({'tag': tag})}", wait_until="load")
    assert set(listed()) == {first, f"prod-{stamp}-2", f"prod-{stamp}-3"}
    page.locator(f"#session-rows a.user:text-is('{other}')").click()
    page.wait_for_url("**user=*")
    assert set(listed()) == {f"prod-{stamp}-2"}
    page.goto(f"{console.url}/sessions?{urlencode({'tag': f'prod, {tag}'})}", wait_until="load")
    assert set(listed()) == {first} and page.input_value("input[name=tag]") == f"{tag},prod"
    screenshots(page, "sessions-by-tag", clip={"x": 0, "y": 0, "width": 1400, "height": 420})

    # Text a user chose is text: nothing runs, no element appears.
    page.goto(f"{console.url}/sessions?{urlencode({'tag': evil_tag})}", wait_until="load")
    assert set(listed()) == {f"prod-{stamp}-3"}
    assert (
        listed()[f"prod-{stamp}-3"][4] == evil_user and evil_tag in listed()[f"prod-{stamp}-3"][5]
    )
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("main img, main script, [onerror], b:text-is('bold')").count() == 0

    # Tag text the store could not hold is a note on the page, not an error.
    page.goto(
        f"{console.url}/sessions?{urlencode({'tag': 'x' * 65, 'user': user})}", wait_until="load"
    )
    assert "tag: tag 'xxxx" in page.inner_text(".banner.note") and len(listed()) == 2

    page.goto(f"{console.url}/sessions/{first}", wait_until="load")
    facts = page.inner_text(".facts")
    assert user in facts and tag in facts and "prod" in facts
    signals = rows(page, "table.feedback tbody tr")
    assert [row[:3] for row in signals] == [
        ["thumbs_up", "1", "session"],
        ["thumbs_down", "-1", f"call {first}-c0"],
    ]
    assert all(row[3] == "feedback" for row in signals)
    assert [row[:1] + row[4:5] for row in rows(page, "h2:text('Rewards') + table tbody tr")] == [
        ["0.25", "sdk"]
    ]
    page.click(f"table.feedback a:text-is('call {first}-c0')")
    assert page.evaluate("location.hash") == "#t1-call-1"
    assert page.errors == []
    screenshots(page, "feedback", clip={"x": 0, "y": 0, "width": 1400, "height": 520})
    page.click(f".facts a.user:text-is('{user}')")
    page.wait_for_url("**/sessions?user=*")
    assert set(listed()) == {first, f"prod-{stamp}-1"}


def test_feedback_is_compared_by_the_policy_version_that_served_each_session(
    console, deployed_stack, page, screenshots
) -> None:
    stamp = time.time_ns()
    tag = f"canary-{stamp}"
    # Version 41 served three sessions (one rated twice, one not at all), version 42 two, each with one signal.
    served = {f"v41-{stamp}-{i}": 41 for i in range(3)} | {f"v42-{stamp}-{i}": 42 for i in range(2)}
    calls = []
    for session_id, version in served.items():
        call = make_call(f"{session_id}-c0", session_id, [1, 2, 3], [[4, 5]])
        call.policy_version = version
        call.tags.append(tag)
        calls.append(call)
    rollout = make_call(
        f"rollout-{stamp}-c0",
        f"rollout-{stamp}",
        [1, 2],
        [[3]],
        metadata={"parity.run_id": "run-x"},
    )
    rollout.tags.append(tag)
    store = StoreClient(deployed_stack.store.address)
    store.write_calls(store_pb.WriteCallsRequest(calls=[*calls, rollout]))
    trajectory = reward_pb2.REWARD_LEVEL_TRAJECTORY

    def signal(session_id: str, name: str, value: float) -> reward_pb2.Reward:
        return reward_pb2.Reward(reward_id=f"{session_id}-{name}", session_id=session_id, level=trajectory, value=value,
                                 source="feedback", name=name)  # fmt: skip

    store.write_rewards(store_pb.WriteRewardsRequest(rewards=[
        signal(f"v41-{stamp}-0", "thumbs_up", 1.0), signal(f"v41-{stamp}-0", "resolved", 2.0),
        signal(f"v41-{stamp}-1", "thumbs_down", -1.0),
        signal(f"v42-{stamp}-0", "thumbs_up", 1.0), signal(f"v42-{stamp}-1", "thumbs_up", 1.0),
        reward_pb2.Reward(reward_id=f"rollout-{stamp}-r", session_id=f"rollout-{stamp}", level=trajectory, value=5.0,
                          source="feedback", name="thumbs_up"),
    ]))  # fmt: skip

    page.goto(f"{console.url}/versions?{urlencode({'tag': tag})}", wait_until="load")
    headings = [
        heading.lower() for heading in rows(page, "#versions thead tr")[0]
    ]  # CSS sets headings in capitals
    assert headings[:5] == [
        "policy version",
        "served as",
        "sessions",
        "with feedback",
        "mean feedback",
    ]
    table = rows(page, "#versions tbody tr")
    # Newest version first; a training run's session is not production traffic and is left out.
    assert [row[:5] for row in table] == [
        ["42", "", "2", "2 (100%)", "1"],
        ["41", "", "3", "2 (67%)", "1"],
    ]
    assert headings[5:] == ["resolved (n, mean)", "thumbs_down (n, mean)", "thumbs_up (n, mean)"]
    assert table[0][5:] == ["", "", "2, 1"] and table[1][5:] == ["1, 2", "1, -1", "1, 1"]
    assert "Every matching session read (6)" in page.inner_text("main")
    assert page.errors == []
    screenshots(page, "feedback-by-version", clip={"x": 0, "y": 0, "width": 1400, "height": 360})


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


def test_unknown_ids_are_404_pages_and_a_down_store_is_a_banner(
    console, trained, deployed_stack, start_console, page, screenshots
) -> None:
    for path in (
        "/sessions/no-such-session",
        "/runs/no-such-run",
        f"/runs/{trained.run_id}/steps/99",
        "/nowhere",
    ):
        response = httpx.get(f"{console.url}{path}")
        assert response.status_code == 404 and "Not found" in response.text, path
    gone = f"127.0.0.1:{free_port()}"
    orphan = start_console("--store-address", gone, "--assembler-address", deployed_stack.assembler.address,
                           "--trainer-address", deployed_stack.trainer.address, "--rpc-timeout-s", "2")  # fmt: skip
    for path in ("/sessions", "/sessions/anything"):
        response = httpx.get(f"{orphan.url}{path}", timeout=30)
        assert (
            response.status_code == 503 and f"the store at {gone} is unavailable" in response.text
        )
    # The trainer still answers: the run pages work without the store.
    assert httpx.get(f"{orphan.url}/runs/{trained.run_id}", timeout=30).status_code == 200
    page.goto(f"{orphan.url}/sessions", wait_until="load")
    assert "unavailable" in page.inner_text(".banner")
    screenshots(page, "store-down", clip={"x": 0, "y": 0, "width": 1400, "height": 360})


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

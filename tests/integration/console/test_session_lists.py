"""The session lists: filtered, and live as new sessions arrive; production sessions found by end user and tag with
their feedback, and feedback compared by the policy version that served each session."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import openai
import pytest

from parity.api.common.v1 import reward_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import StoreClient
from tests.call_factory import make_call
from tests.integration.console.hostile_text import XSS
from tests.integration.console.page_tables import rows

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]


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

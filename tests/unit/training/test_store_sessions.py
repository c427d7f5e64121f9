"""Which stored sessions a from-store run may use, why it skips the others, and its settings' checks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from parity.api.common.v1 import reward_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.core.feedback_rule import FeedbackRule
from parity.training.settings import SettingsError, StackAddresses, TrainSettings
from parity.training.store_sessions import StoreFilters, classify
from tests.call_factory import make_call

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
STACK = StackAddresses("http://i:8000", "a:1", "t:2", "s:3")


def stored(
    idle: timedelta, versions: list[int], feedback: Sequence[float] = (1.0,)
) -> store_pb.SessionContents:
    session = session_pb2.Session(session_id="s", state=session_pb2.SESSION_STATE_OPEN)
    session.update_time.FromDatetime(NOW - idle)
    calls = [make_call(f"c{n}", "s", [1], [[2]]) for n in range(len(versions))]
    for call, version in zip(calls, versions, strict=True):
        call.policy_version = version
    rewards = [
        reward_pb2.Reward(session_id="s", value=v, name="thumbs_up", source="feedback")
        for v in feedback
    ]
    for reward in rewards:
        reward.create_time.FromDatetime(NOW - idle + timedelta(minutes=1))
    return store_pb.SessionContents(session=session, calls=calls, rewards=rewards)


@pytest.mark.parametrize(("contents", "filters", "expected"), [
    (stored(timedelta(hours=1), [3, 3]), StoreFilters(), (1.0, "")),
    (stored(timedelta(minutes=2), [3]), StoreFilters(), (None, "active")),
    (stored(timedelta(hours=1), [1, 3]), StoreFilters(min_policy_version=2), (None, "filtered_out")),
    (stored(timedelta(hours=1), []), StoreFilters(), (None, "filtered_out")),
    (stored(timedelta(hours=30), [3]), StoreFilters(max_age=timedelta(hours=24)), (None, "too_stale")),
    (stored(timedelta(hours=1), [1, 5]), StoreFilters(max_policy_lag=3), (None, "too_stale")),
    (stored(timedelta(hours=1), [3], feedback=[]), StoreFilters(), (None, "no_feedback")),
])  # fmt: skip
def test_each_session_is_usable_with_its_reward_or_skipped_for_one_reason(
    contents, filters, expected
) -> None:
    assert classify(contents, FeedbackRule(), filters, policy_version=5, now=NOW) == expected


def test_a_window_still_open_waits_for_feedback() -> None:
    rule = FeedbackRule(window=timedelta(hours=2))
    assert classify(stored(timedelta(hours=1), [0]), rule, StoreFilters(), 0, NOW) == (
        None,
        "awaiting_feedback",
    )


def test_from_store_settings_are_checked_and_name_the_setting() -> None:
    settings = TrainSettings(from_store=True, stack=STACK, steps=3, store_tags=" prod, checkout,prod",
                             feedback_weights="thumbs_up=1,thumbs_down=-1", feedback_window_hours=24, feedback_default=0)  # fmt: skip
    assert settings.store_tag_list == ("checkout", "prod")
    assert StoreFilters.of(settings).tags == ("checkout", "prod")
    assert settings.feedback == FeedbackRule(
        "sum", {"thumbs_up": 1.0, "thumbs_down": -1.0}, timedelta(hours=24), 0.0
    )
    refused_settings: list[tuple[dict[str, Any], str]] = [
        ({"from_store": True, "steps": 3}, "from_store"),
        ({"from_store": True, "stack": StackAddresses("http://i:8000", "a:1", "t:2"), "steps": 3}, "from_store"),
        ({"from_store": True, "stack": STACK}, "steps"),
        ({"from_store": True, "stack": STACK, "steps": 1, "tasks": "tasks.jsonl"}, "tasks"),
        ({"continuous": True}, "continuous"),
        ({"feedback_default": 1.0}, "feedback_default"),
        ({"feedback_weights": "up"}, "feedback_weights"),
        ({"store_tags": "a," + "x" * 65}, "store_tags"),
        ({"store_max_age_hours": 0.0}, "store_max_age_hours"),
        ({"store_max_policy_lag": -1}, "store_max_policy_lag"),
        ({"promote": True, "val_tasks": "val.jsonl", "promote_margin": -0.1}, "promote_margin"),
        ({"promote_margin": float("inf")}, "promote_margin"),
        ({"promote": True, "val_tasks": "val.jsonl", "promote_model": "assistant-acme"}, "promote_model"),
        ({"lora_rank": 8, "promote_model": "assistant-acme"}, "promote_model"),
    ]  # fmt: skip
    for values, key in refused_settings:
        with pytest.raises(SettingsError) as refused:
            TrainSettings(**values)
        assert refused.value.key == key, values


def test_promote_needs_validation_tasks_for_its_gate() -> None:
    from parity.training.run_inputs import resolve_inputs

    async def agent(task: dict[str, object]) -> float:
        return 0.0

    with pytest.raises(SettingsError) as refused:
        resolve_inputs(agent, [{"id": "a"}], None, TrainSettings(promote=True))
    assert refused.value.key == "promote"
    _, _, validation = resolve_inputs(
        agent, [{"id": "a"}], [{"id": "b"}], TrainSettings(promote=True)
    )
    assert len(validation) == 1

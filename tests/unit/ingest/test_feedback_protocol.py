"""A feedback request read as the Reward the store keeps, and every field the store would refuse refused here first,
as a 400 naming it (so nothing spooled is refused an hour later)."""

from __future__ import annotations

import pytest

from parity.api.common.v1 import reward_pb2
from parity.services.ingest.endpoints.feedback.protocol import (
    feedback_route,
    session_id_of,
    to_reward,
)
from parity.services.ingest.openai_errors import HttpError


def test_a_feedback_body_becomes_a_named_reward_of_source_feedback() -> None:
    reward = to_reward(
        "s1", b'{"value": 1, "name": "thumbs_up", "feedback_id": "vote-1", "metadata": {"k": "v"}}'
    )
    assert (reward.reward_id, reward.session_id, reward.value, reward.name) == (
        "vote-1",
        "s1",
        1.0,
        "thumbs_up",
    )
    assert reward.source == "feedback" and reward.level == reward_pb2.REWARD_LEVEL_TRAJECTORY
    assert dict(reward.metadata) == {"k": "v"} and reward.create_time.seconds > 0
    step = to_reward("s1", b'{"value": -0.5, "call_id": "c7"}')
    assert (step.level, step.call_id) == (reward_pb2.REWARD_LEVEL_STEP, "c7")
    assert step.reward_id and step.reward_id != to_reward("s1", b'{"value": 0}').reward_id


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        (b'{"value": NaN}', "value", "got NaN"),
        (b'{"value": Infinity}', "value", "finite"),
        (b'{"value": 1e999}', "value", "double's range"),
        (b'{"value": true}', "value", "got bool"),
        (b"{}", "value", "required"),
        (b'{"value": 1, "feedback_id": ""}', "feedback_id", "must not be empty"),
        (b'{"value": 1, "call_id": "a\\nb"}', "call_id", "control character"),
        (b'{"value": 1, "name": 3}', "name", "must be a string"),
        (b'{"value": 1, "metadata": ["a"]}', "metadata", "strings"),
        (b'{"value": 1, "reward": 1}', "reward", "unknown field"),
        (b"[1]", None, "JSON object"),
    ],
)
def test_each_bad_field_is_a_400_naming_it(body: bytes, param: str | None, fragment: str) -> None:
    with pytest.raises(HttpError) as refused:
        to_reward("s1", body)
    assert (
        refused.value.status == 400
        and refused.value.param == param
        and fragment in refused.value.message
    )


def test_the_route_keeps_a_percent_encoded_slash_inside_the_session_id() -> None:
    segment = feedback_route(b"/sessions/team%2Fep-1/feedback")
    assert segment == "team%2Fep-1" and session_id_of(segment) == "team/ep-1"
    assert feedback_route(b"/sessions/ep-1/v1/chat/completions") is None
    with pytest.raises(HttpError, match="percent-encoded UTF-8"):
        session_id_of("%ff")

"""A run's feedback rule: which signals count, how they combine, the window and the default."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from parity.api.common.v1 import reward_pb2
from parity.core.feedback_rule import FeedbackRule, is_feedback, parse_weights

LAST_CALL = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def signal(value: float, name: str, minutes: float, source: str = "feedback") -> reward_pb2.Reward:
    reward = reward_pb2.Reward(session_id="s", value=value, name=name, source=source)
    reward.create_time.FromDatetime(LAST_CALL + timedelta(minutes=minutes))
    return reward


SIGNALS = [
    signal(1.0, "thumbs_up", 5),
    signal(1.0, "resolved", 60),
    signal(-1.0, "thumbs_down", 30),
]


@pytest.mark.parametrize(
    ("combine", "expected"),
    [("sum", 1.0), ("mean", 1 / 3), ("min", -1.0), ("max", 1.0), ("last", 1.0)],
)
def test_every_signal_counts_with_weight_one_by_default(combine: str, expected: float) -> None:
    decision = FeedbackRule(combine).decide(SIGNALS, LAST_CALL, LAST_CALL + timedelta(days=1))
    assert (
        decision.reward == pytest.approx(expected) and decision.skip == "" and decision.signals == 3
    )


def test_weights_name_the_signals_that_count() -> None:
    rule = FeedbackRule("sum", parse_weights("resolved=2, thumbs_down = 0.5"))
    assert rule.decide(SIGNALS, LAST_CALL, LAST_CALL + timedelta(days=1)).reward == 2.0 - 0.5
    # The latest of the counted ones, by when it arrived, not by where it is listed.
    assert (
        FeedbackRule("last", {"thumbs_up": 1, "thumbs_down": 1})
        .decide(SIGNALS, LAST_CALL, LAST_CALL + timedelta(days=1))
        .reward
        == -1.0
    )


def test_a_window_waits_for_late_signals_and_ignores_later_ones() -> None:
    rule = FeedbackRule("sum", window=timedelta(minutes=45))
    assert (
        rule.decide(SIGNALS, LAST_CALL, LAST_CALL + timedelta(minutes=40)).skip
        == "awaiting_feedback"
    )
    closed = rule.decide(SIGNALS, LAST_CALL, LAST_CALL + timedelta(hours=2))
    assert (closed.reward, closed.signals) == (0.0, 2)  # "resolved" came 60 minutes after: too late


def test_a_session_without_feedback_is_left_out_or_gets_the_default() -> None:
    unnamed = [signal(0.7, "", 1, source="engine")]
    now = LAST_CALL + timedelta(hours=3)
    assert FeedbackRule().decide(unnamed, LAST_CALL, now).skip == "no_feedback"
    with_default = FeedbackRule(window=timedelta(hours=1), default=0.25).decide([], LAST_CALL, now)
    assert (with_default.reward, with_default.skip, with_default.signals) == (0.25, "", 0)


def test_feedback_is_a_named_reward_or_one_from_the_feedback_source() -> None:
    assert is_feedback(signal(1, "resolved", 0, source="sdk")) and is_feedback(signal(1, "", 0))
    assert not is_feedback(signal(1, "", 0, source="engine"))


@pytest.mark.parametrize(("text", "message"), [
    ("thumbs_up", "NAME=WEIGHT"), ("a=x", "must be a number"), ("a=inf", "must be finite"), ("a=1,a=2", "twice"),
])  # fmt: skip
def test_bad_weights_are_named(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_weights(text)


def test_a_rule_that_cannot_work_is_refused() -> None:
    with pytest.raises(ValueError, match="combine"):
        FeedbackRule("median")
    with pytest.raises(ValueError, match="window"):
        FeedbackRule(default=0.0)
    with pytest.raises(ValueError, match="positive"):
        FeedbackRule(window=timedelta(0))

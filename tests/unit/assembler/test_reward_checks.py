"""Rewards the assembler refuses itself, before the store hears of them: they name the
caller's own field, and a refused CloseSession leaves the session open."""

from __future__ import annotations

import math
from typing import Any, NoReturn

import pytest

from parity.api.common.v1 import reward_pb2, session_pb2
from parity.services.assembler.assembler import Assembler
from parity.services.assembler.rollout_tracker import AssemblySettings
from parity.services.runtime.errors import InvalidArgument


class UntouchableStore:
    """Fails the test on any store call: a refused reward must not reach the store."""

    def __getattr__(self, name: str) -> Any:
        async def called(*args: object, **kwargs: object) -> NoReturn:
            raise AssertionError(f"the store's {name} was called")

        return called


@pytest.fixture
def assembler() -> Assembler:
    return Assembler(UntouchableStore(), AssemblySettings())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reward", "message"),
    [
        (
            reward_pb2.Reward(session_id="s", value=math.nan),
            "reward.value must be a finite number, got nan",
        ),
        (
            reward_pb2.Reward(session_id="s", value=math.inf),
            "reward.value must be a finite number, got inf",
        ),
        (
            reward_pb2.Reward(session_id="s", value=-math.inf),
            "reward.value must be a finite number, got -inf",
        ),
        (reward_pb2.Reward(value=1.0), "reward.session_id is required"),
    ],
)
async def test_report_reward_refuses_a_reward_that_cannot_be_trained_on(
    assembler: Assembler, reward: reward_pb2.Reward, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        await assembler.tracker.report_reward(reward)
    assert assembler.stats.errors == {"invalid_reward": 1}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
async def test_close_session_refuses_a_non_finite_reward_before_closing(
    assembler: Assembler, value: float
) -> None:
    with pytest.raises(InvalidArgument, match="reward must be a finite number"):
        await assembler.tracker.close_session(
            "s",
            session_pb2.SESSION_OUTCOME_SUCCEEDED,
            "",
            reward=value,
            group_id="g",
            episode_id="",
            group_size=2,
        )

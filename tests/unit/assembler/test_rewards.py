"""Which trajectory each reward scores, how rewards become token rewards, and reward functions."""

from __future__ import annotations

import asyncio
import math

import pytest

from parity.api.common.v1 import reward_pb2
from parity.core import tokens
from parity.core.group_returns import has_no_variance
from parity.services.assembler.filters import Staleness
from parity.services.assembler.reward_function import RewardFunction, as_reward, load
from parity.services.assembler.samples import LengthLimit, build_samples
from parity.services.assembler.scoring import ScoringError
from parity.services.assembler.session_marks import BatchMark
from parity.services.assembler.trajectories import split_trajectories
from parity.services.runtime.errors import InvalidArgument
from tests.call_factory import conversation, make_call

TRAJECTORY, STEP = reward_pb2.REWARD_LEVEL_TRAJECTORY, reward_pb2.REWARD_LEVEL_STEP


def reward(
    value: float, name: str = "", level: reward_pb2.RewardLevel = TRAJECTORY, **step
) -> reward_pb2.Reward:
    return reward_pb2.Reward(session_id="s", trajectory_name=name, level=level, value=value, **step)


def test_rewards_find_their_trajectories_and_steps() -> None:
    calls = [make_call("p0", "s", [1], [[2]], trajectory="planner"), make_call("u0", "s", [5], [[6]]),
             make_call("p1", "s", [1, 2, 9], [[3]], trajectory="planner")]  # fmt: skip
    rewards = [reward(1.0), reward(0.5), reward(2.0, "planner"), reward(0.25, level=STEP, call_id="p1"),
               reward(0.75, "planner", STEP, step_index=0), reward(9.0, "nobody"), reward(1.0, level=STEP, step_index=5)]  # fmt: skip
    (unnamed, planner), unmatched = split_trajectories("s", calls, rewards)
    assert (unnamed.name, unnamed.reward, unnamed.has_reward) == ("", 1.5, True)
    assert (planner.reward, planner.step_rewards) == (2.0, {1: 0.25, 0: 0.75})
    assert planner.total_return == 3.0 and unmatched == 1 and unnamed.unplaced_step_rewards == 1


def test_an_unnamed_reward_scores_every_trajectory_when_none_is_unnamed() -> None:
    calls = [
        make_call("a", "s", [1], [[2]], trajectory="a"),
        make_call("b", "s", [1], [[2]], trajectory="b"),
    ]
    trajectories, _ = split_trajectories("s", calls, [reward(1.0)])
    assert [t.reward for t in trajectories] == [1.0, 1.0]


def test_step_rewards_land_on_each_steps_last_sampled_token() -> None:
    calls = conversation("s", turns=3, prompt_len=4, completion_len=2, user_len=1)
    (trajectory,), _ = split_trajectories(
        "s",
        calls,
        [
            reward(1.0),
            reward(0.5, level=STEP, call_id=calls[0].call_id),
            reward(-1.0, level=STEP, step_index=2),
        ],
    )
    (sample,) = build_samples(trajectory, "e", "g", LengthLimit()).samples
    token_rewards = tokens.unpack_floats(sample.token_rewards)
    mask = tokens.unpack_mask(sample.loss_mask)
    assert sample.reward == 1.0 and token_rewards[5] == 0.5 and token_rewards[-1] == -1.0
    assert (
        token_rewards.sum() == -0.5
        and mask[5] == 1
        and sample.metadata["parity.final_sample"] == "true"
    )


def test_the_length_limit_truncates_or_drops() -> None:
    calls = conversation("s", turns=2, prompt_len=10, completion_len=5, user_len=2)
    (trajectory,), _ = split_trajectories("s", calls, [reward(1.0, level=STEP, step_index=1)])
    truncated = build_samples(trajectory, "e", "g", LengthLimit(20, "truncate"))
    (sample,) = truncated.samples
    assert sample.truncated and len(sample.loss_mask) == 20 and truncated.truncated == 1
    assert not tokens.unpack_floats(sample.token_rewards).any(), (
        "the cut step's reward goes with it"
    )
    assert build_samples(trajectory, "e", "g", LengthLimit(20, "drop")).dropped_overlong == 1
    assert build_samples(trajectory, "e", "g", LengthLimit(8, "truncate")).dropped_overlong == 1


def test_group_and_staleness_filters() -> None:
    assert (
        has_no_variance([1.0, 1.0])
        and not has_no_variance([1.0])
        and not has_no_variance([0.0, 1.0])
    )
    assert Staleness(10, 2).is_stale(7) and not Staleness(10, 2).is_stale(8)


def test_batch_marks_round_trip_and_refuse_garbage() -> None:
    mark = BatchMark("trainer", 3, False, 7, None)
    assert BatchMark.decode(mark.encode()) == mark and mark.batch_id == "trainer/3"
    for garbage in ("", "{}", '{"consumer": 1}', "[1]", '{"consumer":"c","sequence":0,"acknowledged":false,'
                    '"policy_version":null,"max_policy_lag":null}'):  # fmt: skip
        with pytest.raises(ValueError, match="malformed"):
            BatchMark.decode(garbage)


def constant(metadata, messages):
    return 0.5 if metadata.get("task") == "t" and messages[-1]["role"] == "assistant" else -1


def raises(metadata, messages):
    raise ValueError("no answer")


def text(metadata, messages):
    return "great"


def test_reward_functions_by_import_path() -> None:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    ok = RewardFunction(f"{__name__}:constant", 5.0)
    assert (
        asyncio.run(ok.score({"task": "t"}, messages)) == 0.5
        and ok.source == f"function:{__name__}:constant"
    )
    with pytest.raises(ScoringError, match="raised ValueError: no answer"):
        asyncio.run(RewardFunction(f"{__name__}:raises", 5.0).score({}, messages))
    with pytest.raises(ScoringError, match="returned 'great' \\(str\\), not a number"):
        asyncio.run(RewardFunction(f"{__name__}:text", 5.0).score({}, messages))
    for path, message in [("nocolon", "package.module:function"), ("no_such_module_xyz:f", "cannot import"),
                          (f"{__name__}:missing", "has no missing"), (f"{__name__}:math", "not a function")]:  # fmt: skip
        with pytest.raises(InvalidArgument, match=message):
            load(path)
    assert as_reward(3, "f", "k") == 3.0
    for bad in (True, math.nan, None):
        with pytest.raises(ScoringError):
            as_reward(bad, "f", "k")

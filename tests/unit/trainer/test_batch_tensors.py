import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from parity.api.common.v1 import sample_pb2
from parity.core import tokens
from parity.services.runtime.errors import InvalidArgument
from parity.services.trainer.batch_tensors import to_training_batch


def make_sample(
    ids, mask, logprobs=None, reward=0.0, group="g", step_rewards=None
) -> sample_pb2.Sample:
    sample = sample_pb2.Sample(
        sample_id=f"s{len(ids)}", group_id=group, token_ids=tokens.pack_token_ids(ids), loss_mask=tokens.pack_mask(mask),
        rollout_logprobs=tokens.pack_floats(logprobs if logprobs is not None else [-1.0 * m for m in mask]), reward=reward,
    )  # fmt: skip
    if step_rewards is not None:
        sample.token_rewards = tokens.pack_floats(step_rewards)
    return sample


def test_shifts_by_one_so_position_t_scores_token_t_plus_1() -> None:
    batch = to_training_batch(
        [make_sample([5, 6, 7, 8], [0, 0, 1, 1], [0, 0, -0.5, -0.25], reward=2.0)]
    )
    assert batch.input_ids.tolist() == [[5, 6, 7, 8]]
    assert batch.response_mask.tolist() == [[0, 1, 1]]
    assert batch.rollout_logprobs.tolist() == [[0, -0.5, -0.25]]
    # verl's outcome estimators read the return from the last sampled token.
    assert batch.token_rewards.tolist() == [[0, 0, 2.0]]


def test_pads_right_and_keeps_groups_and_returns() -> None:
    batch = to_training_batch([
        make_sample([1, 2, 3], [0, 1, 1], reward=1.0, group="a"),
        make_sample([1, 2, 3, 4, 5], [0, 0, 1, 0, 1], reward=0.5, group="b", step_rewards=[0, 0, 0.25, 0, 0]),
    ])  # fmt: skip
    assert batch.attention_mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert batch.response_mask.tolist() == [[1, 1, 0, 0], [0, 1, 0, 1]]
    assert list(batch.group_index) == ["a", "b"]
    assert batch.rewards.tolist() == [1.0, 0.75]
    assert batch.token_rewards[1].tolist() == [0, 0, 0, 0.75]


@pytest.mark.parametrize(
    "sample",
    [
        make_sample([1, 2, 3], [0, 0, 0]),
        sample_pb2.Sample(
            sample_id="x", token_ids=tokens.pack_token_ids([1, 2]), loss_mask=tokens.pack_mask([0])
        ),
    ],
)
def test_refuses_samples_with_nothing_to_learn_or_mismatched_arrays(sample) -> None:
    with pytest.raises(InvalidArgument):
        to_training_batch([sample])


def test_refuses_an_empty_batch() -> None:
    with pytest.raises(InvalidArgument):
        to_training_batch([])


@given(
    st.lists(st.tuples(st.integers(0, 1023), st.booleans()), min_size=2, max_size=40).filter(
        lambda r: any(m for _, m in r[1:])
    )
)
def test_every_sampled_token_is_scored_exactly_once(rows) -> None:
    ids = [i for i, _ in rows]
    mask = [int(m) for _, m in rows]
    batch = to_training_batch([make_sample(ids, mask, reward=1.0)])
    assert int(batch.response_mask.sum()) == sum(mask[1:])
    assert np.isclose(float(batch.token_rewards.sum()), 1.0)
    scored = [ids[t + 1] for t in range(len(ids) - 1) if batch.response_mask[0, t]]
    assert scored == [i for i, m in zip(ids[1:], mask[1:], strict=True) if m]


def test_teacher_scores_shift_with_the_tokens_and_stay_on_sampled_ones() -> None:
    batch = to_training_batch([
        make_sample([1, 2, 3, 4], [0, 1, 0, 1], [0, -0.5, 0, -0.25]),
        make_sample([1, 2, 3], [0, 1, 1], [0, -0.1, -0.2]),
    ])  # fmt: skip
    scored = batch.with_teacher([np.array([0, -1.0, -9.0, -2.0]), np.array([0, -3.0, -4.0])])
    # Token 3 of the first sample came from a tool: the teacher's -9 is no signal.
    teacher, picked = scored.teacher_logprobs, scored.rows(torch.tensor([1])).teacher_logprobs
    assert teacher is not None and teacher.tolist() == [[-1.0, 0, -2.0], [-3.0, -4.0, 0]]
    assert picked is not None and picked.tolist() == [[-3.0, -4.0, 0]]
    assert batch.teacher_logprobs is None


def test_teacher_scores_that_do_not_fit_the_samples_are_refused() -> None:
    batch = to_training_batch([make_sample([1, 2, 3], [0, 1, 1])])
    with pytest.raises(InvalidArgument, match="2 values for 3 tokens"):
        batch.with_teacher([np.array([0, -1.0])])
    with pytest.raises(InvalidArgument, match="not finite"):
        batch.with_teacher([np.array([0, -1.0, np.nan])])
    with pytest.raises(InvalidArgument, match="scored 2 samples of a batch of 1"):
        batch.with_teacher([np.zeros(3), np.zeros(3)])

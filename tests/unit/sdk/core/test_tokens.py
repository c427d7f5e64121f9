import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity.core import tokens

int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)


@given(st.lists(int32s, max_size=300))
def test_token_ids_round_trip(ids: list[int]) -> None:
    packed = tokens.pack_token_ids(ids)
    assert len(packed) == 4 * len(ids)
    assert tokens.unpack_token_ids(packed).tolist() == ids


@given(st.lists(st.floats(width=32, allow_nan=False), max_size=300))
def test_floats_round_trip_exactly_at_float32(values: list[float]) -> None:
    assert tokens.unpack_floats(tokens.pack_floats(values)).tolist() == values


@given(st.lists(st.sampled_from([0, 1]), max_size=300))
def test_mask_round_trip(mask: list[int]) -> None:
    assert tokens.unpack_mask(tokens.pack_mask(mask)).tolist() == mask


def test_layout_is_little_endian_int32() -> None:
    assert tokens.pack_token_ids([1, 256]) == b"\x01\x00\x00\x00\x00\x01\x00\x00"


def test_rejects_ids_outside_int32() -> None:
    with pytest.raises(ValueError, match="int32"):
        tokens.pack_token_ids([2**31])


def test_rejects_mask_values_other_than_zero_and_one() -> None:
    with pytest.raises(ValueError, match="0 or 1"):
        tokens.pack_mask(np.array([0, 2]))


def test_rejects_truncated_buffers() -> None:
    with pytest.raises(ValueError, match="multiple of 4"):
        tokens.unpack_token_ids(b"\x00\x00\x00")


@given(st.lists(int32s, max_size=300), st.integers(min_value=0, max_value=400))
def test_counting_and_cutting_packed_tokens_is_counting_and_cutting_the_ids(
    ids: list[int], count: int
) -> None:
    packed = tokens.pack_token_ids(ids)
    assert tokens.token_count(packed) == len(ids)
    assert tokens.unpack_token_ids(tokens.head_tokens(packed, count)).tolist() == ids[:count]
    assert tokens.token_span(len(ids)) == len(packed)
    logprobs = tokens.pack_floats([0.5] * len(ids))
    assert tokens.token_count(logprobs) == len(ids) and tokens.token_count(
        tokens.head_tokens(logprobs, count)
    ) == min(count, len(ids))


@pytest.mark.parametrize("bad", [[1.5], ["7"], [None], [-(2**31) - 1]])
def test_rejects_ids_that_are_not_int32_integers(bad: list[object]) -> None:
    with pytest.raises(ValueError, match="int32"):
        tokens.pack_token_ids(bad)  # type: ignore[arg-type]


@given(st.lists(int32s, max_size=50))
def test_lists_tuples_and_arrays_pack_alike(ids: list[int]) -> None:
    assert (
        tokens.pack_token_ids(ids)
        == tokens.pack_token_ids(tuple(ids))
        == tokens.pack_token_ids(np.array(ids, dtype=np.int64))
    )


def test_floats_beyond_float32_become_infinities_as_a_cast_does() -> None:
    with np.errstate(over="ignore"):
        assert tokens.unpack_floats(tokens.pack_floats([-1e300, 1e300, -0.5])).tolist() == [
            -np.inf,
            np.inf,
            -0.5,
        ]

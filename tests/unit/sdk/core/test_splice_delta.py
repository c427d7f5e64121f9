import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity.core import splice_delta
from parity.core.tokens import TOKEN_BYTES, pack_token_ids, unpack_token_ids


@given(st.binary(max_size=200), st.binary(max_size=200))
def test_decode_inverts_encode(base: bytes, target: bytes) -> None:
    assert splice_delta.decode(base, splice_delta.encode(base, target)) == target


@given(
    st.binary(max_size=64), st.binary(max_size=64), st.binary(max_size=64), st.binary(max_size=64)
)
def test_appending_between_shared_parts_stores_only_the_new_bytes(head, old, new, tail) -> None:
    base, target = head + old + tail, head + old + new + tail
    splice = splice_delta.encode(base, target)
    assert len(splice.middle) <= len(new)
    assert splice_delta.decode(base, splice) == target


@given(
    st.lists(st.integers(0, 2**31 - 1), max_size=40),
    st.lists(st.integers(0, 2**31 - 1), max_size=40),
)
def test_unit_keeps_cuts_on_token_boundaries(base_ids, target_ids) -> None:
    pack = lambda ids: b"".join(i.to_bytes(4, "little") for i in ids)  # noqa: E731
    splice = splice_delta.encode(pack(base_ids), pack(target_ids), unit=4)
    assert splice.prefix_len % 4 == 0 and splice.suffix_len % 4 == 0 and len(splice.middle) % 4 == 0
    assert splice_delta.decode(pack(base_ids), splice) == pack(target_ids)


def test_decode_rejects_a_splice_longer_than_its_base() -> None:
    with pytest.raises(ValueError, match="needs 5 bytes"):
        splice_delta.decode(b"abc", splice_delta.Splice(3, 2, b""))


def _naive_prefix_len(a: bytes, b: bytes) -> int:
    length = 0
    while length < min(len(a), len(b)) and a[length] == b[length]:
        length += 1
    return length


@given(st.binary(max_size=64), st.binary(max_size=32), st.binary(max_size=32))
def test_shared_prefix_and_suffix_are_the_longest_there_are(
    shared: bytes, left: bytes, right: bytes
) -> None:
    a, b = shared + left, shared + right
    assert splice_delta.common_prefix_len(a, b) == _naive_prefix_len(a, b)
    assert splice_delta.common_suffix_len(a[::-1], b[::-1], len(a)) == _naive_prefix_len(a, b)


@given(
    st.lists(st.integers(0, 2**31 - 1), max_size=80),
    st.lists(st.integers(0, 2**31 - 1), max_size=20),
    st.data(),
)
def test_a_splice_in_tokens_rebuilds_the_prompt_the_ids_describe(
    base: list[int], middle: list[int], data
) -> None:
    prefix = data.draw(st.integers(0, len(base)))
    suffix = data.draw(st.integers(0, len(base) - prefix))
    splice = splice_delta.token_splice(prefix, suffix, pack_token_ids(middle))
    rebuilt = splice_delta.decode(pack_token_ids(base), splice)
    assert unpack_token_ids(rebuilt).tolist() == base[:prefix] + middle + base[len(base) - suffix :]
    # The encoder, cutting on whole tokens, finds a splice at least as short.
    target = pack_token_ids(base[:prefix] + middle + base[len(base) - suffix :])
    assert len(splice_delta.encode(pack_token_ids(base), target, TOKEN_BYTES).middle) <= len(
        splice.middle
    )

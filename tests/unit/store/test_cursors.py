import contextlib

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from parity.services.runtime import page_tokens
from parity.services.runtime.errors import InvalidArgument
from parity.services.store import cursors

ids = st.text(min_size=1, max_size=40).filter(lambda s: "\x1f" not in s)


@given(ids, st.integers(0, 2**63 - 1))
def test_cursor_round_trips(store_id: str, seq: int) -> None:
    assert cursors.decode_cursor(cursors.encode_cursor(store_id, seq), store_id) == seq


@given(ids, st.integers(0, 2**63 - 1))
def test_page_token_round_trips(scope: str, key: int) -> None:
    assert page_tokens.decode_page_token(page_tokens.encode_page_token(scope, key), scope) == key


def test_empty_cursor_and_token_start_at_the_beginning() -> None:
    assert cursors.decode_cursor("", "s") == 0
    assert page_tokens.decode_page_token("", "q") == 0


def test_a_cursor_from_another_store_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="belongs to another store"):
        cursors.decode_cursor(cursors.encode_cursor("a", 5), "b")


def test_a_page_token_from_another_query_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="different query"):
        page_tokens.decode_page_token(page_tokens.encode_page_token("calls:s1", 5), "calls:s2")


@given(st.text(max_size=60))
def test_garbage_is_invalid_argument_never_a_crash(garbage: str) -> None:
    for decode in (
        lambda t: cursors.decode_cursor(t, "s"),
        lambda t: page_tokens.decode_page_token(t, "q"),
    ):
        with contextlib.suppress(InvalidArgument):
            decode(garbage)


# '²' passes str.isdigit() but not int(); '٣' passes int() but str(int) never writes it;
# the rest are past what a 64-bit key column holds (or int() parses at all).
@pytest.mark.parametrize("position", ["²", "1²", "٣", str(2**63), "9" * 5000])
def test_a_position_no_encoder_wrote_is_malformed(position: str) -> None:
    with pytest.raises(InvalidArgument, match="cursor .* is malformed"):
        cursors.decode_cursor(page_tokens.encode_fields("c1", "s", position), "s")
    with pytest.raises(InvalidArgument, match="page_token .* is malformed"):
        page_tokens.decode_page_token(page_tokens.encode_fields("p1", "q", position), "q")


@given(st.text(max_size=25))
@example("²")
def test_any_position_decodes_to_its_key_or_is_invalid_argument(position: str) -> None:
    for decode in (
        lambda: cursors.decode_cursor(page_tokens.encode_fields("c1", "s", position), "s"),
        lambda: page_tokens.decode_page_token(page_tokens.encode_fields("p1", "q", position), "q"),
    ):
        with contextlib.suppress(InvalidArgument):
            assert decode() == int(position)

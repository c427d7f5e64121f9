import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity.session_slug import SessionRef, decode, encode

ids = st.text(min_size=1, max_size=40)
refs = st.builds(
    SessionRef,
    session_id=ids,
    parent_session_ids=st.lists(ids, max_size=4).map(tuple),
    trajectory_name=st.text(max_size=20),
    metadata=st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=4),
)


@given(refs)
def test_round_trips_through_a_url_safe_segment(ref: SessionRef) -> None:
    slug = encode(ref)
    assert all(c.isalnum() or c in "._~-" for c in slug)
    assert decode(slug) == ref


def test_a_plain_id_is_its_own_slug() -> None:
    assert encode(SessionRef("episode-7")) == "episode-7"
    assert decode("episode-7") == SessionRef("episode-7")


@pytest.mark.parametrize(
    ("slug", "message"),
    [
        ("has space", "not a valid session id"),
        ("p1.!!!", "not valid base64 JSON"),
        ("p1.W10", "non-empty string 's'"),
        ("x" * 9000, "at most 8192"),
    ],
)
def test_bad_slugs_say_what_is_wrong(slug: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode(slug)


@given(st.text(max_size=100))
def test_arbitrary_text_decodes_or_raises_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        decode(text)

import base64
import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity.core.session_slug import SessionRef, decode, encode

# Any text the store accepts: no control characters in ids, no NUL in metadata.
id_text = st.characters(exclude_categories=["Cc", "Cs"])
free_text = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
ids = st.text(id_text, min_size=1, max_size=40)
refs = st.builds(
    SessionRef,
    session_id=ids,
    parent_session_ids=st.lists(ids, max_size=4).map(tuple),
    trajectory_name=st.text(id_text, max_size=20),
    metadata=st.dictionaries(
        st.text(id_text, min_size=1, max_size=10), st.text(free_text, max_size=20), max_size=4
    ),
    end_user_id=st.text(id_text, max_size=20),
    thread_id=st.text(id_text, max_size=20),
    tags=st.lists(
        st.from_regex(r"[a-z0-9][a-z0-9 :/._-]{0,10}[a-z0-9]", fullmatch=True), max_size=4
    ).map(lambda tags: tuple(sorted(set(tags)))),
).filter(lambda ref: ref.session_id not in ref.parent_session_ids)


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


def _packed(document: dict) -> str:
    return "p1." + base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (SessionRef("s" * 257), "session_id is 257 characters; at most 256"),
        (SessionRef("leaf", ("root", "p" * 300)), r"parent_session_ids\[1\] is 300 characters"),
        (SessionRef("leaf", trajectory_name="t" * 257), "trajectory_name is 257 characters"),
        (SessionRef("a\x1fb"), "session_id 'a.x1fb' contains a control character"),
        (SessionRef("leaf", ("root", "")), "empty"),
        (SessionRef("leaf", ("leaf",)), "cannot be its own ancestor"),
        (SessionRef("leaf", metadata={"k": "a\x00b"}), "metadata 'k' contains a NUL"),
        (
            SessionRef("leaf", metadata={"k\nk": "v"}),
            "metadata key 'k.nk' contains a control character",
        ),
        (SessionRef("leaf", metadata={"": "v"}), "metadata key '' must be 1 to 256 characters"),
        (SessionRef("leaf", end_user_id="u" * 257), "end_user_id is 257 characters"),
        (SessionRef("leaf", thread_id="w" * 257), "thread_id is 257 characters"),
        (SessionRef("leaf", thread_id="a\nb"), "thread_id 'a.nb' contains a control character"),
        (SessionRef("leaf", end_user_id="a\tb"), "end_user_id 'a.tb' contains a control character"),
        (SessionRef("leaf", tags=("a,b",)), "tag 'a,b' must be 1 to 64 characters, without commas"),
        (SessionRef("leaf", tags=(" a",)), "spaces at either end"),
        (SessionRef("leaf", tags=tuple(f"t{i:02}" for i in range(33))), "33 tags; at most 32"),
    ],
)
def test_ids_the_store_would_refuse_are_refused_both_ways(ref: SessionRef, message: str) -> None:
    """A slug that decodes is one the store accepts: a call never fails only once it is captured."""
    document = {
        "s": ref.session_id, "p": list(ref.parent_session_ids), "t": ref.trajectory_name, "m": dict(ref.metadata),
        "u": ref.end_user_id, "g": list(ref.tags), "r": ref.thread_id,
    }  # fmt: skip
    with pytest.raises(ValueError, match=message):
        encode(ref)
    with pytest.raises(ValueError, match=message):
        decode(_packed(document))


def test_a_slugs_tags_come_back_sorted_without_repeats() -> None:
    assert decode(_packed({"s": "leaf", "g": ["b", "a", "b"]})).tags == ("a", "b")
    with pytest.raises(ValueError, match="tags must be sorted and without repeats"):
        encode(SessionRef("leaf", tags=("b", "a")))


@given(st.text(max_size=100))
def test_arbitrary_text_decodes_or_raises_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        decode(text)

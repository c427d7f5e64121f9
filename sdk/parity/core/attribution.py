"""Who a deployed agent's session served, and labels to find it by: an end-user id and tags.

They travel with each call (the session's slug from `parity.session(user=..., tags=...)`,
or the `X-Parity-User` and `X-Parity-Tags` headers), and the token store indexes them:
sessions are listed, trained on and deleted by end user and by tag. The end-user id is
the operator's own (an account id, a hash), never a name; Parity does not interpret it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

USER_HEADER = "X-Parity-User"
TAGS_HEADER = "X-Parity-Tags"
MAX_END_USER_ID_LENGTH = 256
MAX_TAG_LENGTH = 64
MAX_TAGS = 32
# Tags are comma-separated in a header, so a tag holds no comma, and no space at either end.
_TAG = re.compile(r"[^\s,\x00-\x1f\x7f](?:[^,\x00-\x1f\x7f]*[^\s,\x00-\x1f\x7f])?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_end_user_id(end_user_id: str, field: str = "end_user_id") -> str:
    """The id as given; raises ValueError naming `field` if the store could not keep it."""
    if len(end_user_id) > MAX_END_USER_ID_LENGTH:
        raise ValueError(
            f"{field} is {len(end_user_id)} characters; at most {MAX_END_USER_ID_LENGTH} are allowed"
        )
    if _CONTROL.search(end_user_id):
        raise ValueError(f"{field} {end_user_id[:40]!r} contains a control character")
    return end_user_id


def normalize_tags(tags: Iterable[str], field: str = "tags") -> tuple[str, ...]:
    """The tags sorted, without repeats; raises ValueError naming `field` for a tag that is
    not 1 to 64 characters without commas, control characters or surrounding spaces."""
    if isinstance(tags, str):
        raise ValueError(f"{field} must be a list of tags, not one string")
    unique = set()
    for tag in tags:
        if not isinstance(tag, str) or len(tag) > MAX_TAG_LENGTH or not _TAG.fullmatch(tag):
            raise ValueError(
                f"{field}: tag {str(tag)[:40]!r} must be 1 to {MAX_TAG_LENGTH} characters, "
                "without commas, control characters or spaces at either end"
            )
        unique.add(tag)
    if len(unique) > MAX_TAGS:
        raise ValueError(f"{field} holds {len(unique)} tags; at most {MAX_TAGS} are allowed")
    return tuple(sorted(unique))


def parse_tags_header(value: str) -> tuple[str, ...]:
    """`X-Parity-Tags: prod, checkout` as tags; raises ValueError naming the header."""
    return normalize_tags((part.strip() for part in value.split(",") if part.strip()), TAGS_HEADER)

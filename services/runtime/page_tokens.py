"""Opaque page tokens for List RPCs, bound to the query that issued them.

A token is a position (an integer key) in one query, tagged with that query's
scope, so it cannot be replayed against a different one.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import TypeVar

from parity.services.runtime.errors import InvalidArgument

Item = TypeVar("Item")

_VERSION = "p1"
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
# Keys and sequence numbers are signed 64-bit integers in every backend.
_MAX_POSITION = 2**63 - 1


def encode_fields(*parts: str) -> str:
    return base64.urlsafe_b64encode("\x1f".join(parts).encode()).decode().rstrip("=")


def decode_fields(token: str, what: str) -> list[str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        return raw.decode().split("\x1f")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidArgument(f"{what} {token!r} is malformed") from None


def decode_position(field: str) -> int | None:
    """The key in a token's field, or None if the field is not one `str(key)` could
    have written. str.isdigit() is not enough: it takes '²', which int() refuses, and
    a key past 64 bits is one no backend can compare against."""
    if not (field.isascii() and field.isdecimal()) or len(field) > len(str(_MAX_POSITION)):
        return None
    position = int(field)
    return position if position <= _MAX_POSITION else None


def page_size(requested: int) -> int:
    """The page size to use: the documented default for 0, capped at the maximum."""
    if requested < 0:
        raise InvalidArgument(f"page_size must not be negative, got {requested}")
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def encode_page_token(scope: str, key: int) -> str:
    return encode_fields(_VERSION, scope, str(key))


def decode_page_token(token: str, scope: str) -> int:
    """The key after which the page starts; 0 for the empty token (first page)."""
    if not token:
        return 0
    parts = decode_fields(token, "page_token")
    key = decode_position(parts[2]) if len(parts) == 3 and parts[0] == _VERSION else None
    if key is None:
        raise InvalidArgument(f"page_token {token!r} is malformed")
    if parts[1] != scope:
        raise InvalidArgument(
            f"page_token {token!r} belongs to a different query; start again without one"
        )
    return key


def page_of(
    items: Sequence[Item], requested_size: int, token: str, scope: str
) -> tuple[Sequence[Item], str]:
    """One page of a list held in memory, and the token of the next ("" after the last): for List RPCs over a
    list whose order is stable between calls. Keyed lists page in their backend, by key."""
    size = page_size(requested_size)
    start = decode_page_token(token, scope)
    return items[start : start + size], encode_page_token(
        scope, start + size
    ) if start + size < len(items) else ""

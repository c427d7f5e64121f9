"""Opaque watch cursors and page tokens.

A watch cursor is a position in the store's commit order, tagged with the store's
id so a cursor from another store (or a wiped one) is refused instead of silently
skipping or repeating calls. A page token is a position in one list query, tagged
with that query, so it cannot be replayed against a different one.
"""

from __future__ import annotations

import base64
import binascii

from parity.services.runtime.errors import InvalidArgument

_CURSOR_VERSION = "c1"
_PAGE_VERSION = "p1"


def _encode(*parts: str) -> str:
    return base64.urlsafe_b64encode("\x1f".join(parts).encode()).decode().rstrip("=")


def _decode(token: str, what: str) -> list[str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        return raw.decode().split("\x1f")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidArgument(f"{what} {token!r} is malformed") from None


def encode_cursor(store_id: str, seq: int) -> str:
    return _encode(_CURSOR_VERSION, store_id, str(seq))


def decode_cursor(cursor: str, store_id: str) -> int:
    """The commit sequence number after which to resume; 0 for the empty cursor."""
    if not cursor:
        return 0
    parts = _decode(cursor, "cursor")
    if len(parts) != 3 or parts[0] != _CURSOR_VERSION or not parts[2].isdigit():
        raise InvalidArgument(f"cursor {cursor!r} is malformed")
    if parts[1] != store_id:
        raise InvalidArgument(f"cursor {cursor!r} belongs to another store (id {parts[1]}, this is {store_id})")
    return int(parts[2])


def encode_page_token(scope: str, key: int) -> str:
    return _encode(_PAGE_VERSION, scope, str(key))


def decode_page_token(token: str, scope: str) -> int:
    """The key after which the page starts; 0 for the empty token (first page)."""
    if not token:
        return 0
    parts = _decode(token, "page_token")
    if len(parts) != 3 or parts[0] != _PAGE_VERSION or not parts[2].isdigit():
        raise InvalidArgument(f"page_token {token!r} is malformed")
    if parts[1] != scope:
        raise InvalidArgument(f"page_token {token!r} belongs to a different query; start again without one")
    return int(parts[2])

"""Opaque watch cursors.

A watch cursor is a position in one of the store's orders (calls in commit order,
sessions in close order). It is tagged with the store's id, so a cursor from another
store (or a wiped one) is refused instead of silently skipping or repeating, and with
the order it points into, so a call cursor cannot resume a watch of closes. Page
tokens live in parity.services.runtime.page_tokens.
"""

from __future__ import annotations

from parity.services.runtime.errors import InvalidArgument
from parity.services.runtime.page_tokens import decode_fields, encode_fields

# One tag per order a cursor can point into.
_CURSOR_VERSIONS = {"calls": "c1", "closes": "s1"}


def encode_cursor(store_id: str, seq: int, order: str = "calls") -> str:
    return encode_fields(_CURSOR_VERSIONS[order], store_id, str(seq))


def decode_cursor(cursor: str, store_id: str, order: str = "calls") -> int:
    """The sequence number after which to resume; 0 for the empty cursor."""
    if not cursor:
        return 0
    parts = decode_fields(cursor, "cursor")
    if len(parts) != 3 or parts[0] not in _CURSOR_VERSIONS.values() or not parts[2].isdigit():
        raise InvalidArgument(f"cursor {cursor!r} is malformed")
    if parts[0] != _CURSOR_VERSIONS[order]:
        raise InvalidArgument(f"cursor {cursor!r} is not a cursor of {order}")
    if parts[1] != store_id:
        raise InvalidArgument(f"cursor {cursor!r} belongs to another store (id {parts[1]}, this is {store_id})")
    return int(parts[2])

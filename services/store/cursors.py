"""Opaque watch cursors.

A watch cursor is a position in one of the store's orders (calls in commit order,
sessions in close order). It is tagged with the store's id, so a cursor from another
store (or a wiped one) is refused instead of silently skipping or repeating, and with
the order it points into, so a call cursor cannot resume a watch of closes. Page
tokens live in parity.services.runtime.page_tokens.
"""

from __future__ import annotations

from parity.services.runtime.errors import InvalidArgument
from parity.services.runtime.page_tokens import decode_fields, decode_position, encode_fields

# One tag per order a cursor can point into.
_CURSOR_VERSIONS = {"calls": "c1", "closes": "s1"}


def encode_cursor(store_id: str, seq: int, order: str = "calls") -> str:
    return encode_fields(_CURSOR_VERSIONS[order], store_id, str(seq))


def decode_cursor(cursor: str, store_id: str, order: str = "calls") -> int:
    """The sequence number after which to resume; 0 for the empty cursor."""
    if not cursor:
        return 0
    parts = decode_fields(cursor, "cursor")
    tagged = len(parts) == 3 and parts[0] in _CURSOR_VERSIONS.values()
    seq = decode_position(parts[2]) if tagged else None
    if seq is None:
        raise InvalidArgument(f"cursor {cursor!r} is malformed")
    if parts[0] != _CURSOR_VERSIONS[order]:
        raise InvalidArgument(f"cursor {cursor!r} is not a cursor of {order}")
    if parts[1] != store_id:
        raise InvalidArgument(
            f"cursor {cursor!r} belongs to another store (id {parts[1]}, this is {store_id})"
        )
    return seq

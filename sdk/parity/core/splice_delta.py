"""Store a byte string as an edit of an earlier one: shared prefix, new middle, shared suffix.

A multi-turn conversation re-sends everything said before on every call, so call N's
prompt tokens and request JSON are call N-1's plus a little new text, sometimes with
the request's trailing fields (tools, sampling params) repeated after it. One splice
captures that exactly, costs two vectorised scans, and degrades gracefully: an
edited history only makes the middle longer.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from parity.core.tokens import token_span


# A tuple, not a frozen dataclass: the writer makes two per stored call, and a frozen
# dataclass takes twice as long to build.
class Splice(NamedTuple):
    """target == base[:prefix_len] + middle + base[len(base) - suffix_len:]"""

    prefix_len: int
    suffix_len: int
    middle: bytes


def common_prefix_len(a: bytes, b: bytes, unit: int = 1) -> int:
    """Length in bytes of the longest common prefix, rounded down to whole `unit`s."""
    n = min(len(a), len(b))
    n -= n % unit
    if n == 0:
        return 0
    length = _first_mismatch(
        np.frombuffer(a, dtype=np.uint8, count=n), np.frombuffer(b, dtype=np.uint8, count=n)
    )
    return length - length % unit


def common_suffix_len(a: bytes, b: bytes, limit: int, unit: int = 1) -> int:
    """Longest common suffix in bytes, at most `limit`, rounded down to whole `unit`s."""
    n = min(len(a), len(b), limit)
    n -= n % unit
    if n == 0:
        return 0
    left = np.frombuffer(a, dtype=np.uint8, offset=len(a) - n, count=n)[::-1]
    right = np.frombuffer(b, dtype=np.uint8, offset=len(b) - n, count=n)[::-1]
    length = _first_mismatch(left, right)
    return length - length % unit


def _first_mismatch(left: np.ndarray, right: np.ndarray) -> int:
    """Index of the first differing element, or the length when none differs."""
    differs = left != right
    # argmax stops at the first True; listing every mismatch would cost a scan and
    # an index array as long as the unshared tail.
    first = int(differs.argmax())
    return first if differs[first] else len(differs)


def encode(base: bytes, target: bytes, unit: int = 1) -> Splice:
    """The splice turning `base` into `target`; `unit` keeps cuts on element boundaries."""
    if target.startswith(base):
        # The common case, an append: one memcmp instead of two scans.
        return Splice(len(base), 0, target[len(base) :])
    prefix_len = common_prefix_len(base, target, unit)
    # The suffix may not overlap the prefix in either string.
    suffix_len = common_suffix_len(base, target, min(len(base), len(target)) - prefix_len, unit)
    return Splice(prefix_len, suffix_len, target[prefix_len : len(target) - suffix_len])


def token_splice(prefix_tokens: int, suffix_tokens: int, middle: bytes) -> Splice:
    """A splice of packed token arrays given in tokens, as CALL_VIEW_SPLICED sends it."""
    return Splice(token_span(prefix_tokens), token_span(suffix_tokens), middle)


def decode(base: bytes, splice: Splice) -> bytes:
    if splice.prefix_len + splice.suffix_len > len(base):
        raise ValueError(
            f"splice needs {splice.prefix_len + splice.suffix_len} bytes of base, which has {len(base)}"
        )
    return base[: splice.prefix_len] + splice.middle + base[len(base) - splice.suffix_len :]

"""Packing of token arrays as they travel in Parity's protobuf messages.

Token ids are little-endian int32, logprobs and per-token rewards little-endian
float32, loss masks uint8 (see protos/parity/api/common/v1/tokens.proto). numpy
reads and writes these without a per-token Python loop. Python lists (what JSON
decodes to: ingest packs every captured call) go through `struct`, which packs them
in about half numpy's time, since numpy first converts every element to a scalar.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

TOKEN_ID_DTYPE = np.dtype("<i4")
FLOAT_DTYPE = np.dtype("<f4")
MASK_DTYPE = np.dtype("u1")
TOKEN_BYTES = 4
"""Bytes one token takes in a packed array of token ids, logprobs or per-token rewards."""


def token_count(packed: bytes | bytearray) -> int:
    """How many tokens a packed token id, logprob or per-token reward array holds."""
    return len(packed) // TOKEN_BYTES


def token_span(count: int) -> int:
    """How many bytes `count` packed tokens take."""
    return count * TOKEN_BYTES


def head_tokens(packed: bytes, count: int) -> bytes:
    """The first `count` tokens of a packed array (all of it when it holds fewer)."""
    return packed[: count * TOKEN_BYTES]


def pack_token_ids(token_ids: Sequence[int] | npt.NDArray[np.integer]) -> bytes:
    """Pack token ids; raises ValueError if one is outside int32."""
    if isinstance(token_ids, list | tuple):
        try:
            return struct.pack(f"<{len(token_ids)}i", *token_ids)
        except struct.error:
            raise ValueError("token ids must be integers that fit in int32") from None
    array = np.asarray(token_ids)
    if array.size and (
        array.min() < np.iinfo(TOKEN_ID_DTYPE).min or array.max() > np.iinfo(TOKEN_ID_DTYPE).max
    ):
        raise ValueError("token ids must fit in int32")
    return array.astype(TOKEN_ID_DTYPE, copy=False).tobytes()


def unpack_token_ids(packed: bytes | bytearray) -> npt.NDArray[np.int32]:
    return np.frombuffer(_checked(packed, TOKEN_ID_DTYPE, "token ids"), dtype=TOKEN_ID_DTYPE)


def pack_floats(values: Sequence[float] | npt.NDArray[np.floating]) -> bytes:
    """Pack logprobs or per-token rewards as float32."""
    if isinstance(values, list | tuple):
        try:
            return struct.pack(f"<{len(values)}f", *values)
        except (OverflowError, struct.error):
            pass  # beyond float32's range: numpy rounds it to an infinity, as a float32 cast does
    return np.asarray(values, dtype=FLOAT_DTYPE).tobytes()


def unpack_floats(packed: bytes) -> npt.NDArray[np.float32]:
    return np.frombuffer(_checked(packed, FLOAT_DTYPE, "float array"), dtype=FLOAT_DTYPE)


def pack_mask(mask: Sequence[int] | npt.NDArray[np.integer]) -> bytes:
    """Pack a loss mask; raises ValueError on any value other than 0 or 1."""
    array = np.asarray(mask)
    if array.size and not np.isin(array, (0, 1)).all():
        raise ValueError("loss mask values must be 0 or 1")
    return array.astype(MASK_DTYPE, copy=False).tobytes()


def unpack_mask(packed: bytes) -> npt.NDArray[np.uint8]:
    return np.frombuffer(packed, dtype=MASK_DTYPE)


def common_prefix(a: npt.NDArray[np.integer], b: npt.NDArray[np.integer]) -> int:
    """How many leading token ids two sequences share."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def _checked(packed: bytes | bytearray, dtype: np.dtype, what: str) -> bytes | bytearray:
    if len(packed) % dtype.itemsize:
        raise ValueError(
            f"packed {what} length {len(packed)} is not a multiple of {dtype.itemsize}"
        )
    return packed

"""How values read in a page: enum labels, times, durations, numbers."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper


def enum_label(enum: EnumTypeWrapper, value: int, prefix: str) -> str:
    """RUN_STATE_WAITING_FOR_DATA -> "waiting for data"; an unknown number shows as itself."""
    try:
        name = enum.Name(value)
    except ValueError:
        return str(value)
    return name.removeprefix(prefix).lower().replace("_", " ")


def timestamp_text(stamp: timestamp_pb2.Timestamp) -> str:
    if not stamp.seconds and not stamp.nanos:
        return ""
    return datetime.fromtimestamp(stamp.seconds + stamp.nanos / 1e9, UTC).strftime(
        "%Y-%m-%d %H:%M:%S"
    )


def seconds(duration: duration_pb2.Duration) -> float:
    return duration.seconds + duration.nanos / 1e9


def number(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    if 1e-3 <= abs(value) < 1e5:
        return f"{value:.{digits}g}"
    return f"{value:.2e}"

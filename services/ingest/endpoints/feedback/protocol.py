"""A feedback request as the Reward the store keeps, checked field by field.

    POST /sessions/{session_id}/feedback
    {"value": 1.0, "name": "thumbs_up", "feedback_id": "vote-5521", "call_id": "...", "trajectory": "...",
     "metadata": {"channel": "web"}}

Only `value` is required. The checks are the store's own (ids of at most 256
characters without control characters, a name of at most 64, a finite value), made
here so that bad input is a 400 naming its field at once, and never a spooled
feedback the store refuses an hour later.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from parity.api.common.v1 import reward_pb2
from parity.core.feedback_rule import FEEDBACK_SOURCE
from parity.core.ids import new_id
from parity.core.session_slug import MAX_ID_LENGTH, check_metadata
from parity.services.ingest import openai_errors

# The store's limit on a reward's name.
MAX_NAME_LENGTH = 64
FIELDS = ("value", "name", "feedback_id", "call_id", "trajectory", "metadata")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FEEDBACK_PATH = re.compile(rb"/sessions/([^/]+)/feedback/?")


class _NonFinite:
    """`NaN`, `Infinity` or `-Infinity` in the body: JSON has no such numbers, but Python's json (behind many
    clients' `json=`) writes them, so they are parsed into this to be refused by the field that holds them."""

    def __init__(self, literal: str) -> None:
        self.literal = literal


def feedback_route(raw_path: bytes) -> str | None:
    """The session segment of `/sessions/{session_id}/feedback`, still percent-encoded, or None for any other
    path. Matched on the raw path, so a session id holding `/` (which the SDK sends as `%2F`) is one segment."""
    match = _FEEDBACK_PATH.fullmatch(raw_path)
    return match.group(1).decode("latin-1") if match is not None else None


def session_id_of(segment: str) -> str:
    """The session id a percent-encoded path segment names."""
    try:
        session_id = unquote(segment, errors="strict")
    except UnicodeDecodeError:
        raise openai_errors.bad_request(
            "the session id in the URL is not percent-encoded UTF-8", "session_id"
        ) from None
    return _check_id(session_id, "session_id")


def to_reward(session_id: str, raw_body: bytes) -> reward_pb2.Reward:
    """The Reward for a feedback request about `session_id` (checked: session_id_of); a 400 naming the field
    for anything the store would refuse."""
    body = _parse(raw_body)
    unknown = sorted(body.keys() - set(FIELDS))
    if unknown:
        raise openai_errors.bad_request(
            f"unknown field(s) {', '.join(map(repr, unknown))}; a feedback body holds {', '.join(FIELDS)}",
            unknown[0],
        )
    reward = reward_pb2.Reward(
        reward_id=_optional_id(body, "feedback_id") or new_id(),
        session_id=session_id,
        # Empty is the session's only or unnamed trajectory, as in the Reward.
        trajectory_name=_optional_id(body, "trajectory", empty_allowed=True),
        value=_value(body.get("value")),
        source=FEEDBACK_SOURCE,
        name=_name(body.get("name")),
        metadata=_metadata(body.get("metadata")),
    )
    call_id = _optional_id(body, "call_id")
    if call_id:
        reward.level, reward.call_id = reward_pb2.REWARD_LEVEL_STEP, call_id
    else:
        reward.level = reward_pb2.REWARD_LEVEL_TRAJECTORY
    # When the feedback arrived, not when a spooled one reached the store.
    reward.create_time.FromNanoseconds(time.time_ns())
    return reward


def _parse(raw_body: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw_body, parse_constant=_NonFinite)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise openai_errors.bad_request(f"request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise openai_errors.bad_request("request body must be a JSON object")
    return body


def _value(value: Any) -> float:
    if value is None:
        raise openai_errors.bad_request(
            "value is required: the feedback's score, a finite number", "value"
        )
    if isinstance(value, _NonFinite):
        raise openai_errors.bad_request(
            f"value must be a finite number, got {value.literal}", "value"
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise openai_errors.bad_request(
            f"value must be a finite number, got {type(value).__name__}", "value"
        )
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        # 1e400 parses as infinity; an integer too large for a double overflows.
        raise openai_errors.bad_request(
            "value must be a finite number; it is out of a double's range", "value"
        )
    return number


def _optional_id(body: Mapping[str, Any], field: str, *, empty_allowed: bool = False) -> str:
    value = body.get(field)
    if value is None:
        return ""
    return _check_id(value, field, empty_allowed=empty_allowed)


def _check_id(value: Any, field: str, *, empty_allowed: bool = False) -> str:
    """An empty feedback or call id is refused rather than read as absent: it is a sender's bug, and taken as
    absent it would turn a retry into a second signal, or a call's score into the session's."""
    if not isinstance(value, str):
        raise openai_errors.bad_request(f"{field} must be a string", field)
    if not value and not empty_allowed:
        raise openai_errors.bad_request(f"{field} must not be empty; leave it out instead", field)
    if len(value) > MAX_ID_LENGTH:
        raise openai_errors.bad_request(
            f"{field} is {len(value)} characters; at most {MAX_ID_LENGTH} are allowed", field
        )
    if _CONTROL.search(value):
        raise openai_errors.bad_request(f"{field} contains a control character", field)
    return value


def _name(name: Any) -> str:
    if name is None:
        return ""
    if not isinstance(name, str):
        raise openai_errors.bad_request(
            "name must be a string: what the signal is, e.g. thumbs_up", "name"
        )
    if len(name) > MAX_NAME_LENGTH:
        raise openai_errors.bad_request(
            f"name is {len(name)} characters; at most {MAX_NAME_LENGTH} are allowed", "name"
        )
    if _CONTROL.search(name):
        raise openai_errors.bad_request("name contains a control character", "name")
    return name


def _metadata(metadata: Any) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise openai_errors.bad_request(
            "metadata must be an object whose values are strings", "metadata"
        )
    try:
        check_metadata(metadata)
    except ValueError as error:
        raise openai_errors.bad_request(str(error), "metadata") from None
    return metadata

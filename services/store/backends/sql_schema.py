"""Row <-> column conversions shared by the SQL backends (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from typing import Any

from parity.services.store.records import CallRow, RewardRow, SessionRow
from parity.splice_delta import Splice

CALL_COLUMNS = (
    "seq, call_id, session_id, trajectory_name, ref_call_id, ref_choice, ref_depth, "
    "prompt_prefix, prompt_suffix, prompt_middle, request_prefix, request_suffix, request_middle, "
    "body, logical_tokens, create_time"
)
SESSION_COLUMNS = (
    "key, session_id, parent_session_ids, metadata, state, outcome, error_message, "
    "call_count, create_time, update_time, close_time, close_seq"
)
REWARD_COLUMNS = "key, reward_id, session_id, body, create_time"


def call_values(row: CallRow) -> tuple[Any, ...]:
    return (
        row.seq, row.call_id, row.session_id, row.trajectory_name, row.ref_call_id, row.ref_choice,
        row.ref_depth, row.prompt.prefix_len, row.prompt.suffix_len, row.prompt.middle,
        row.request.prefix_len, row.request.suffix_len, row.request.middle, row.body,
        row.logical_tokens, row.create_time,
    )  # fmt: skip


def call_from_values(values: tuple[Any, ...]) -> CallRow:
    (seq, call_id, session_id, trajectory_name, ref_call_id, ref_choice, ref_depth, prompt_prefix,
     prompt_suffix, prompt_middle, request_prefix, request_suffix, request_middle, body,
     logical_tokens, create_time) = values  # fmt: skip
    return CallRow(
        call_id=call_id,
        session_id=session_id,
        trajectory_name=trajectory_name,
        body=bytes(body),
        prompt=Splice(prompt_prefix, prompt_suffix, bytes(prompt_middle)),
        request=Splice(request_prefix, request_suffix, bytes(request_middle)),
        ref_call_id=ref_call_id,
        ref_choice=ref_choice,
        ref_depth=ref_depth,
        logical_tokens=logical_tokens,
        create_time=create_time,
        seq=seq,
    )


def session_from_values(values: tuple[Any, ...]) -> SessionRow:
    (key, session_id, parents, metadata, state, outcome, error_message, call_count, create_time,
     update_time, close_time, close_seq) = values  # fmt: skip
    return SessionRow(
        session_id=session_id,
        parent_session_ids=_json(parents),
        metadata=_json(metadata),
        state=state,
        outcome=outcome,
        error_message=error_message,
        call_count=call_count,
        create_time=create_time,
        update_time=update_time,
        close_time=close_time,
        key=key,
        close_seq=close_seq or 0,
    )


def reward_from_values(values: tuple[Any, ...]) -> RewardRow:
    key, reward_id, session_id, body, create_time = values
    return RewardRow(reward_id, session_id, bytes(body), create_time, key)


def _json(value: Any) -> Any:
    # PostgreSQL's jsonb arrives decoded; SQLite's text does not.
    return json.loads(value) if isinstance(value, str) else value

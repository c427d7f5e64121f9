"""What the store keeps, independent of the backend that keeps it.

A call is stored as a row whose prompt tokens and request JSON are splices against
its *reference*: the previous call of the same trajectory, when this call's prompt
extends it. Reading a call follows references back to a call stored in full; a
chain is cut (the call stored in full) every `MAX_REF_DEPTH` calls, so a read
touches a bounded number of rows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import NamedTuple

from parity.core.splice_delta import Splice

MAX_REF_DEPTH = 32

# Numeric values of the proto enums, stored as plain integers by every backend.
SESSION_STATE_OPEN = 1
SESSION_STATE_CLOSED = 2


@dataclass(slots=True)
class CallRow:
    call_id: str
    session_id: str
    trajectory_name: str
    # The LlmCall, serialized, with prompt_token_ids and request_json cleared.
    body: bytes
    # Prompt tokens as a splice against the reference's prompt (+ one choice's
    # completion when ref_choice >= 0); against b"" when there is no reference.
    prompt: Splice
    # Request JSON as a splice against the reference's request JSON.
    request: Splice
    ref_call_id: str | None = None
    ref_choice: int = -1
    ref_depth: int = 0
    # Prompt plus completion tokens the call represents before deduplication.
    logical_tokens: int = 0
    create_time: float = 0.0
    # Assigned by the backend on commit: the call's position in commit order.
    seq: int = 0


@dataclass(slots=True)
class SessionRow:
    session_id: str
    parent_session_ids: list[str]
    metadata: dict[str, str]
    # Who the session served, and its tags (sorted, no repeats): from its first call
    # that carries them; empty until one does.
    end_user_id: str = ""
    tags: list[str] = field(default_factory=list)
    state: int = SESSION_STATE_OPEN
    outcome: int = 0
    error_message: str = ""
    call_count: int = 0
    create_time: float = 0.0
    update_time: float = 0.0
    close_time: float | None = None
    # Creation order, for stable paging.
    key: int = 0
    # Position in close order, assigned when the session closes; 0 while open.
    close_seq: int = 0

    @property
    def parent_session_id(self) -> str | None:
        return self.parent_session_ids[-1] if self.parent_session_ids else None


@dataclass(slots=True)
class SessionTouch:
    """How one committed batch changes a session: created if missing, calls added. Its
    parents, metadata, end user and tags are kept only where the session has none yet."""

    session_id: str
    parent_session_ids: list[str]
    metadata: dict[str, str]
    added_calls: int
    time: float
    end_user_id: str = ""
    tags: list[str] = field(default_factory=list)


@dataclass(slots=True)
class SessionClose:
    """One CloseSession: the session is created if missing, and `metadata` merged in."""

    session_id: str
    outcome: int
    error_message: str
    metadata: dict[str, str]


@dataclass(slots=True)
class MetadataUpdate:
    """Keys to set, then keys to remove, in one session's metadata."""

    session_id: str
    set_keys: dict[str, str]
    remove_keys: list[str]

    def apply(self, metadata: dict[str, str]) -> dict[str, str]:
        merged = metadata | self.set_keys
        for key in self.remove_keys:
            merged.pop(key, None)
        return merged


@dataclass(slots=True)
class RewardRow:
    reward_id: str
    session_id: str
    # The Reward, serialized.
    body: bytes
    create_time: float
    key: int = 0


@dataclass(slots=True)
class CallBatch:
    """One transaction's worth of new calls and the sessions they touch."""

    calls: list[CallRow] = field(default_factory=list)
    sessions: list[SessionTouch] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SessionQuery:
    """Which sessions ListSessions returns, and in what order. None or empty matches any."""

    state: int | None = None
    parent_session_id: str | None = None
    outcome: int | None = None
    # Every pair must be in the session's metadata, with exactly this value.
    metadata: tuple[tuple[str, str], ...] = ()
    session_id_prefix: str = ""
    end_user_id: str | None = None
    # The session must carry every one of these tags.
    tags: tuple[str, ...] = ()
    newest_first: bool = False

    def scope(self) -> str:
        """What a page token is bound to: the same query, page after page. A digest, since
        metadata values may hold any character, page tokens' field separator included."""
        digest = hashlib.blake2b(repr(self).encode(), digest_size=12).hexdigest()
        return f"sessions:{digest}"

    def matches(self, row: SessionRow) -> bool:
        return (
            (self.state is None or row.state == self.state)
            and (self.parent_session_id is None or row.parent_session_id == self.parent_session_id)
            and (self.outcome is None or row.outcome == self.outcome)
            and row.session_id.startswith(self.session_id_prefix)
            and all(row.metadata.get(key) == value for key, value in self.metadata)
            and (self.end_user_id is None or row.end_user_id == self.end_user_id)
            and all(tag in row.tags for tag in self.tags)
        )


class DeletedCounts(NamedTuple):
    """What one DeleteSessions removed."""

    sessions: int
    calls: int
    rewards: int


@dataclass(frozen=True, slots=True)
class BackendStats:
    session_count: int
    call_count: int
    reward_count: int
    logical_token_count: int
    bytes_on_disk: int

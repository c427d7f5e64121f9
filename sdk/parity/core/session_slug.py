"""The session segment of an ingest base URL: `http://HOST:PORT/sessions/{slug}/v1`.

A plain session id is its own slug (`/sessions/episode-7/v1`), so curl users can
type one. Nested sessions, a trajectory name, a thread, metadata and a budget need more than a URL
segment can hold as is (so do an end user and tags); they travel as `p1.` followed by URL-safe base64 of a
compact JSON object. Both forms are also accepted in the `X-Parity-Session` header.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from parity.core.attribution import check_end_user_id, normalize_tags
from parity.core.session_budget import SessionBudget

PREFIX = "p1."
MAX_SLUG_LENGTH = 8192
# The token store's limit on ids; a slug it would refuse is refused here, before the call is made.
MAX_ID_LENGTH = 256
_PLAIN_ID = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,255}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# How ingest builds a session's prompts (see docs/multi-turn.md); empty: ingest's own setting.
HISTORY_MODES = ("as_deployed", "exact_history")


@dataclass(frozen=True)
class SessionRef:
    """Which session a call belongs to, and what the SDK knows about it."""

    session_id: str
    parent_session_ids: tuple[str, ...] = ()
    trajectory_name: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    history_mode: str = ""
    """One of HISTORY_MODES, or empty for the mode ingest runs with."""
    budget: SessionBudget | None = None
    """Caps ingest enforces on the session (parity/core/session_budget.py); None: ingest's serving default."""
    end_user_id: str = ""
    """The end user the session serves (parity/core/attribution.py); empty: none given."""
    tags: tuple[str, ...] = ()
    """Labels of the session, sorted, without repeats."""
    thread_id: str = ""
    """The thread of the session its calls belong to (an orchestrator's, a subagent's); empty: the assembler finds
    each call's thread from its token ids."""


UNASSIGNED = SessionRef("unassigned")
"""The reserved session ingest files a call under when the call names none."""


def encode(ref: SessionRef) -> str:
    check(ref)
    plain = not (
        ref.parent_session_ids or ref.trajectory_name or ref.metadata or ref.history_mode or ref.budget
        or ref.end_user_id or ref.tags or ref.thread_id
    )  # fmt: skip
    if plain and _PLAIN_ID.fullmatch(ref.session_id) and not ref.session_id.startswith(PREFIX):
        return ref.session_id
    document: dict[str, object] = {"s": ref.session_id}
    if ref.parent_session_ids:
        document["p"] = list(ref.parent_session_ids)
    if ref.trajectory_name:
        document["t"] = ref.trajectory_name
    if ref.metadata:
        document["m"] = dict(ref.metadata)
    if ref.history_mode:
        document["h"] = ref.history_mode
    if ref.budget:
        document["b"] = ref.budget.to_json()
    if ref.end_user_id:
        document["u"] = ref.end_user_id
    if ref.tags:
        document["g"] = list(ref.tags)
    if ref.thread_id:
        document["r"] = ref.thread_id
    packed = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
    slug = PREFIX + base64.urlsafe_b64encode(packed).decode().rstrip("=")
    if len(slug) > MAX_SLUG_LENGTH:
        raise ValueError(
            f"session slug is {len(slug)} characters; at most {MAX_SLUG_LENGTH} fit in a URL"
        )
    return slug


def decode(slug: str) -> SessionRef:
    """Parse a slug; raises ValueError saying what is wrong with it."""
    if len(slug) > MAX_SLUG_LENGTH:
        raise ValueError(
            f"session slug is {len(slug)} characters; at most {MAX_SLUG_LENGTH} are accepted"
        )
    if not slug.startswith(PREFIX):
        if not _PLAIN_ID.fullmatch(slug):
            raise ValueError(
                f"session {slug!r} is not a valid session id (letters, digits, '.', '_', '~', '-'; "
                f"at most 256) nor a '{PREFIX}' slug"
            )
        return SessionRef(slug)
    body = slug[len(PREFIX) :]
    try:
        document = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError):
        raise ValueError(f"session slug {slug[:40]!r}... is not valid base64 JSON") from None
    if (
        not isinstance(document, dict)
        or not isinstance(document.get("s"), str)
        or not document["s"]
    ):
        raise ValueError(
            "session slug must hold an object with a non-empty string 's' (the session id)"
        )
    parents, trajectory, metadata = (
        document.get("p", []),
        document.get("t", ""),
        document.get("m", {}),
    )
    if not isinstance(parents, list) or not all(isinstance(p, str) and p for p in parents):
        raise ValueError("session slug 'p' must be a list of non-empty session ids")
    if not isinstance(trajectory, str):
        raise ValueError("session slug 't' must be a string")
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError("session slug 'm' must map strings to strings")
    history_mode = document.get("h", "")
    if not isinstance(history_mode, str):
        raise ValueError("session slug 'h' must be a string")
    try:
        budget = SessionBudget.from_json(document["b"]) if "b" in document else None
    except ValueError as error:
        raise ValueError(f"session slug 'b': {error}") from None
    end_user_id, tags = document.get("u", ""), document.get("g", [])
    if not isinstance(end_user_id, str):
        raise ValueError("session slug 'u' must be a string")
    if not isinstance(tags, list):
        raise ValueError("session slug 'g' must be a list of tags")
    thread_id = document.get("r", "")
    if not isinstance(thread_id, str):
        raise ValueError("session slug 'r' (the thread) must be a string")
    ref = SessionRef(
        document["s"], tuple(parents), trajectory, metadata, history_mode, budget, end_user_id,
        normalize_tags(tags, "session slug 'g'"), thread_id,
    )  # fmt: skip
    check(ref)
    return ref


def check(ref: SessionRef) -> None:
    """Raise ValueError if the token store would refuse the session's ids or metadata."""
    if not ref.session_id:
        raise ValueError("session_id must not be empty")
    named = [
        ("session_id", ref.session_id),
        ("trajectory_name", ref.trajectory_name),
        ("thread_id", ref.thread_id),
    ]
    named += [
        (f"parent_session_ids[{i}]", parent) for i, parent in enumerate(ref.parent_session_ids)
    ]
    for what, value in named:
        if len(value) > MAX_ID_LENGTH:
            raise ValueError(
                f"{what} is {len(value)} characters; at most {MAX_ID_LENGTH} are allowed"
            )
        if _CONTROL.search(value):
            raise ValueError(f"{what} {value[:40]!r} contains a control character")
    if not all(ref.parent_session_ids):
        raise ValueError("parent_session_ids must not contain empty ids")
    if ref.session_id in ref.parent_session_ids:
        raise ValueError(f"session {ref.session_id!r} cannot be its own ancestor")
    check_metadata(ref.metadata)
    check_end_user_id(ref.end_user_id)
    if ref.tags != normalize_tags(ref.tags):
        raise ValueError(
            "tags must be sorted and without repeats (parity.core.attribution.normalize_tags)"
        )
    if ref.history_mode and ref.history_mode not in HISTORY_MODES:
        raise ValueError(
            f"history_mode must be one of {', '.join(HISTORY_MODES)}, got {ref.history_mode[:40]!r}"
        )


def check_metadata(metadata: Mapping[str, str]) -> None:
    """Keys are held to the id rules; values are free text, but not NUL, which
    PostgreSQL's JSON cannot hold."""
    for key, value in metadata.items():
        if not key or len(key) > MAX_ID_LENGTH:
            raise ValueError(f"metadata key {key[:40]!r} must be 1 to {MAX_ID_LENGTH} characters")
        if _CONTROL.search(key):
            raise ValueError(f"metadata key {key[:40]!r} contains a control character")
        if "\x00" in value:
            raise ValueError(f"metadata {key[:40]!r} contains a NUL character")

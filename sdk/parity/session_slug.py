"""The session segment of an ingest base URL: `http://HOST:PORT/sessions/{slug}/v1`.

A plain session id is its own slug (`/sessions/episode-7/v1`), so curl users can
type one. Nested sessions, a trajectory name and metadata need more than a URL
segment can hold as is; they travel as `p1.` followed by URL-safe base64 of a
compact JSON object. Both forms are also accepted in the `X-Parity-Session` header.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

PREFIX = "p1."
MAX_SLUG_LENGTH = 8192
_PLAIN_ID = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,255}")


@dataclass(frozen=True)
class SessionRef:
    """Which session a call belongs to, and what the SDK knows about it."""

    session_id: str
    parent_session_ids: tuple[str, ...] = ()
    trajectory_name: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)


def encode(ref: SessionRef) -> str:
    if not ref.session_id:
        raise ValueError("session_id must not be empty")
    plain = not (ref.parent_session_ids or ref.trajectory_name or ref.metadata)
    if plain and _PLAIN_ID.fullmatch(ref.session_id) and not ref.session_id.startswith(PREFIX):
        return ref.session_id
    document: dict[str, object] = {"s": ref.session_id}
    if ref.parent_session_ids:
        document["p"] = list(ref.parent_session_ids)
    if ref.trajectory_name:
        document["t"] = ref.trajectory_name
    if ref.metadata:
        document["m"] = dict(ref.metadata)
    packed = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
    slug = PREFIX + base64.urlsafe_b64encode(packed).decode().rstrip("=")
    if len(slug) > MAX_SLUG_LENGTH:
        raise ValueError(f"session slug is {len(slug)} characters; at most {MAX_SLUG_LENGTH} fit in a URL")
    return slug


def decode(slug: str) -> SessionRef:
    """Parse a slug; raises ValueError saying what is wrong with it."""
    if len(slug) > MAX_SLUG_LENGTH:
        raise ValueError(f"session slug is {len(slug)} characters; at most {MAX_SLUG_LENGTH} are accepted")
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
    if not isinstance(document, dict) or not isinstance(document.get("s"), str) or not document["s"]:
        raise ValueError("session slug must hold an object with a non-empty string 's' (the session id)")
    parents, trajectory, metadata = document.get("p", []), document.get("t", ""), document.get("m", {})
    if not isinstance(parents, list) or not all(isinstance(p, str) and p for p in parents):
        raise ValueError("session slug 'p' must be a list of non-empty session ids")
    if not isinstance(trajectory, str):
        raise ValueError("session slug 't' must be a string")
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError("session slug 'm' must map strings to strings")
    return SessionRef(document["s"], tuple(parents), trajectory, metadata)

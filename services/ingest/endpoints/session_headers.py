"""What a request's headers say of its session, read at the HTTP door (http_api.py) as they were sent; which
session that makes is session_resolution.py's to say.

The X-Parity-* headers are read here only: ingest builds its upstream request from the body, so none of them
reaches vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from parity.core.attribution import TAGS_HEADER, USER_HEADER
from parity.services.ingest import openai_errors

THREAD_HEADER = "X-Parity-Thread"


@dataclass(frozen=True)
class SessionHeaders:
    """What a request's headers say of its session: X-Parity-Session, X-Parity-Budget, X-Parity-User,
    X-Parity-Tags and X-Parity-Thread, as sent."""

    session: str | None = None
    budget: str | None = None
    user: str | None = None
    tags: str | None = None
    thread: str | None = None

    @classmethod
    def read(cls, headers: Mapping[bytes, bytes]) -> SessionHeaders:
        """The headers of an ASGI request (names lower-case). Raises a 400 naming a header that is not UTF-8."""
        session, budget = headers.get(b"x-parity-session"), headers.get(b"x-parity-budget")
        # Latin-1, as HTTP defines header bytes; a slug outside ASCII is refused by its own checks.
        return cls(
            session.decode("latin-1") if session else None,
            budget.decode("latin-1") if budget is not None else None,
            _utf8(headers.get(b"x-parity-user"), USER_HEADER),
            _utf8(headers.get(b"x-parity-tags"), TAGS_HEADER),
            _utf8(headers.get(b"x-parity-thread"), THREAD_HEADER),
        )


def _utf8(value: bytes | None, name: str) -> str | None:
    """An end-user id or tag as the client's own string: clients send non-ASCII header values as UTF-8, and a
    user named in a header must match the same user named in a slug (JSON, UTF-8)."""
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise openai_errors.bad_request(f"{name} is not valid UTF-8", name) from None

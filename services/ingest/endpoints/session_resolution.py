"""Which session a request belongs to: the URL, else the header, else the body's metadata; and its budget."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from parity.services.ingest import openai_errors
from parity.session_budget import HEADER as BUDGET_HEADER
from parity.session_budget import SessionBudget
from parity.session_slug import SessionRef, check_metadata, decode

UNASSIGNED = SessionRef("unassigned")
# The body key an agent can set instead of a URL or header: `metadata={"parity_session": ...}`.
METADATA_SESSION_KEY = "parity_session"


@dataclass(frozen=True)
class SessionHeaders:
    """What a request's headers say of its session: X-Parity-Session and X-Parity-Budget, as sent."""

    session: str | None = None
    budget: str | None = None


def resolve(path_slug: str | None, headers: SessionHeaders, body: dict[str, Any]) -> tuple[SessionRef, dict[str, str]]:
    """The session (its budget the tighter of the slug's and the header's) and the call's metadata (the
    session's, then the request's own)."""
    header = headers.session
    metadata = body.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise openai_errors.bad_request("metadata must be an object whose values are strings", "metadata")
    source, slug = next(
        ((name, value) for name, value in (
            ("URL", path_slug), ("X-Parity-Session header", header), ("metadata.parity_session", metadata.get(METADATA_SESSION_KEY)),
        ) if value),
        (None, None),
    )  # fmt: skip
    if slug is None:
        session = UNASSIGNED
    else:
        try:
            session = decode(slug)
        except ValueError as error:
            raise openai_errors.bad_request(f"invalid session in {source}: {error}") from None
    if headers.budget is not None:
        try:
            budget = SessionBudget.parse_header(headers.budget)
        except ValueError as error:
            raise openai_errors.bad_request(str(error), BUDGET_HEADER) from None
        session = dataclasses.replace(session, budget=budget.tightest(session.budget))
    merged = dict(session.metadata)
    merged.update((k, v) for k, v in metadata.items() if k != METADATA_SESSION_KEY)
    try:
        check_metadata(merged)
    except ValueError as error:
        raise openai_errors.bad_request(str(error), "metadata") from None
    return session, merged

"""Which session a request belongs to: the URL, else the header, else the body's metadata; its budget; and who it
serves (an end user and tags), for every API alike.

The end user is the first found of: the session slug's, the X-Parity-User header, the request's own field for it
(OpenAI's `user`, Anthropic's `metadata.user_id`). The slug comes first because `parity.session(user=...)` is the
operator's own statement; the API's field is often a client library's default. Tags are the slug's and the
X-Parity-Tags header's together. The thread is the X-Parity-Thread header's, else the slug's: an agent framework
that sets one header per subagent names its threads without changing its URLs. The headers come as the HTTP door
read them (session_headers.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from parity.core.attribution import (
    TAGS_HEADER,
    USER_HEADER,
    check_end_user_id,
    normalize_tags,
    parse_tags_header,
)
from parity.core.session_budget import HEADER as BUDGET_HEADER
from parity.core.session_budget import SessionBudget
from parity.core.session_slug import UNASSIGNED, SessionRef, check, check_metadata, decode
from parity.services.ingest import openai_errors
from parity.services.ingest.endpoints.session_headers import THREAD_HEADER, SessionHeaders

# The body key an agent can set instead of a URL or header: `metadata={"parity_session": ...}`.
METADATA_SESSION_KEY = "parity_session"
UserField = Literal["user", "metadata.user_id"]
"""Where an API's request names its end user: OpenAI's `user` (chat, completions, Responses), Anthropic's
`metadata.user_id` (Messages)."""
OPENAI_USER: UserField = "user"
ANTHROPIC_USER: UserField = "metadata.user_id"


def resolve(
    path_slug: str | None, headers: SessionHeaders, body: dict[str, Any], user_field: UserField = OPENAI_USER
) -> tuple[SessionRef, dict[str, str]]:  # fmt: skip
    """The session (its budget the tighter of the slug's and the header's, its end user and tags the call's) and
    the call's metadata (the session's, then the request's own)."""
    header = headers.session
    metadata = body.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise openai_errors.bad_request(
            "metadata must be an object whose values are strings", "metadata"
        )
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
    session = _attributed(session, headers, _body_user(body, metadata, user_field))
    if headers.thread and headers.thread.strip():
        session = dataclasses.replace(session, thread_id=headers.thread.strip())
        try:
            check(session)
        except ValueError as error:
            raise openai_errors.bad_request(
                str(error).replace("thread_id", THREAD_HEADER), THREAD_HEADER
            ) from None
    merged = dict(session.metadata)
    merged.update((k, v) for k, v in metadata.items() if k != METADATA_SESSION_KEY)
    try:
        check_metadata(merged)
    except ValueError as error:
        raise openai_errors.bad_request(str(error), "metadata") from None
    return session, merged


def _body_user(body: Mapping[str, Any], metadata: Mapping[str, str], user_field: UserField) -> str:
    """The end user the request's own API field names; empty if none. Checked even when the slug or header
    names the user, so a request is refused alike whichever way it is attributed."""
    value = metadata.get("user_id") if user_field == ANTHROPIC_USER else body.get("user")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise openai_errors.bad_request(f"{user_field} must be a string", user_field)
    try:
        return check_end_user_id(value, user_field)
    except ValueError as error:
        raise openai_errors.bad_request(str(error), user_field) from None


def _attributed(session: SessionRef, headers: SessionHeaders, body_user: str) -> SessionRef:
    """`session` with the call's end user and tags. An empty header is no header: a proxy's or SDK's default
    of `X-Parity-User: ` names nobody."""
    header_user = headers.user.strip() if headers.user else ""
    if header_user:
        try:
            check_end_user_id(header_user, USER_HEADER)
        except ValueError as error:
            raise openai_errors.bad_request(str(error), USER_HEADER) from None
    header_tags: tuple[str, ...] = ()
    if headers.tags:
        try:
            header_tags = parse_tags_header(headers.tags)
        except ValueError as error:
            raise openai_errors.bad_request(str(error), TAGS_HEADER) from None
    end_user_id = session.end_user_id or header_user or body_user
    if header_tags:
        try:
            # Each side is at most 32 tags; together they may be more.
            tags = normalize_tags((*session.tags, *header_tags), TAGS_HEADER)
        except ValueError as error:
            raise openai_errors.bad_request(
                f"{error} (the session's and the header's together)", TAGS_HEADER
            ) from None
    else:
        tags = session.tags
    if (end_user_id, tags) == (session.end_user_id, session.tags):
        return session
    return dataclasses.replace(session, end_user_id=end_user_id, tags=tags)

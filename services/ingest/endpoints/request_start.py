"""The start every endpoint makes of a request: its JSON object, its model, its session, the model serving it.

Errors are raised as HttpError; each endpoint answers them in its API's shape. The
sampling bounds the translated APIs (Anthropic Messages, Responses) share are here too,
so a request is refused alike whichever of them it came through.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from parity.core.session_slug import SessionRef
from parity.services.ingest import openai_errors
from parity.services.ingest.endpoints import session_resolution
from parity.services.ingest.endpoints.session_headers import SessionHeaders
from parity.services.ingest.endpoints.session_resolution import OPENAI_USER, UserField
from parity.services.ingest.model_aliases import ModelAliases

Started = tuple[dict[str, Any], str, str, SessionRef, dict[str, str], dict[str, Any]]
"""The request, the model it asks for, the model serving it, its session, the call's metadata, and what the
access log says of it."""

# OpenAI's and Anthropic's bounds alike.
SAMPLING_BOUNDS = (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0))


def start(
    raw_body: bytes, path_slug: str | None, headers: SessionHeaders, aliases: ModelAliases,
    check: Callable[[dict[str, Any]], None] | None = None, user_field: UserField = OPENAI_USER,
) -> Started:  # fmt: skip
    """The request checked as far as every endpoint checks it; `check`: the endpoint's own checks, made before
    the session is resolved (so a request wrong in both is told of its body first); `user_field`: where the API's
    request names its end user."""
    request = parse_json_object(raw_body)
    model = required_model(request)
    if check is not None:
        check(request)
    session, metadata = session_resolution.resolve(path_slug, headers, request, user_field)
    log = {"session_id": session.session_id, "model": model, "stream": bool(request.get("stream"))}
    return request, model, aliases.resolve(model), session, metadata, log


def parse_json_object(raw_body: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw_body)
    except orjson.JSONDecodeError as error:
        raise openai_errors.bad_request(f"request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise openai_errors.bad_request("request body must be a JSON object")
    return body


def required_model(request: Mapping[str, Any]) -> str:
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise openai_errors.bad_request("model is required and must be a non-empty string", "model")
    return model


def copy_sampling(request: Mapping[str, Any], chat: dict[str, Any]) -> None:
    """The request's temperature and top_p, each checked against its bounds, into the chat body."""
    for name, low, high in SAMPLING_BOUNDS:
        value = request.get(name)
        if value is not None:
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not low <= value <= high
            ):
                raise openai_errors.bad_request(
                    f"{name} must be a number in [{low:g}, {high:g}]", name
                )
            chat[name] = value

"""Feedback that arrives after an episode: `parity.feedback(session_id, 1.0, name="thumbs_up")`.

A deployed agent's session ends long before anyone knows whether it helped: a
thumbs-up comes minutes later, a ticket is resolved days later. Each such signal is
posted to ingest (`POST /sessions/{id}/feedback`, the agent key) and kept with the
session as a named reward; a run's rule turns a session's signals into its reward.
Ingest spools feedback it cannot store at once, as it does calls, so a store outage
loses none (the receipt's status says `spooled`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

from parity.config import current_config
from parity.core.ids import new_id
from parity.flushing import ingest_http_client
from parity.sessions import current_session

FEEDBACK_PATH = "/sessions/{session_id}/feedback"


@dataclass(frozen=True)
class FeedbackReceipt:
    feedback_id: str
    session_id: str
    status: Literal["stored", "duplicate", "spooled"]
    """stored: in the store now; duplicate: this id was stored before, with this value;
    spooled: kept by ingest until the store answers again."""


class FeedbackError(RuntimeError):
    """Ingest refused the feedback, or could not be reached; `status_code` is 0 for the latter."""

    def __init__(self, message: str, status_code: int = 0) -> None:
        super().__init__(message)
        self.status_code = status_code


def feedback(
    session_id: str | None,
    value: float,
    *,
    name: str = "",
    feedback_id: str | None = None,
    call_id: str | None = None,
    trajectory: str = "",
    metadata: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> FeedbackReceipt:
    """Record a signal about a session (None: the current one), or about one of its calls.

    `name` says what the signal is (`thumbs_up`, `resolved`); a session may get several.
    Pass a stable `feedback_id` (a ticket event id) so a retry is a no-op; the same id
    with another value is refused. Raises FeedbackError with ingest's reason for an
    unknown session, a conflicting id or bad input.
    """
    if session_id is None:
        ref = current_session()
        if ref is None:
            raise ValueError("parity.feedback() needs a session id outside parity.session()")
        session_id, trajectory = ref.session_id, trajectory or ref.trajectory_name
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"feedback value must be a finite number, got {value}")
    body: dict[str, object] = {"value": value, "feedback_id": feedback_id or new_id()}
    if name:
        body["name"] = name
    if call_id:
        body["call_id"] = call_id
    if trajectory:
        body["trajectory"] = trajectory
    if metadata:
        body["metadata"] = dict(metadata)
    config = current_config()
    timeout_s = config.rpc_timeout_s if timeout_s is None else timeout_s
    url = config.ingest_url + FEEDBACK_PATH.format(session_id=quote(session_id, safe=""))
    try:
        response = ingest_http_client(config.ingest_url).post(
            url, json=body, headers={"Authorization": f"Bearer {config.api_key}"}, timeout=timeout_s
        )
    except Exception as error:  # noqa: BLE001 - any transport failure means the same to the caller
        raise FeedbackError(f"could not send feedback to ingest at {url}: {error!r}") from None
    if response.status_code != 200:
        try:
            reason = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            reason = response.text[:500]
        raise FeedbackError(
            f"ingest refused feedback for session {session_id!r} (HTTP {response.status_code}): {reason}",
            response.status_code,
        )
    answer = response.json()
    return FeedbackReceipt(answer["feedback_id"], answer["session_id"], answer["status"])


async def afeedback(session_id: str | None, value: float, **options: object) -> FeedbackReceipt:
    """`feedback()` for async code, without blocking the event loop."""
    return await asyncio.to_thread(feedback, session_id, value, **options)  # type: ignore[arg-type]

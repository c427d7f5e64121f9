"""The thread a request names, by the X-Parity-Thread header or its session's slug, and bad threads refused in
OpenAI's error shape."""

from __future__ import annotations

import pytest

from parity.core.session_slug import SessionRef, encode
from parity.services.ingest.endpoints.session_headers import SessionHeaders
from parity.services.ingest.endpoints.session_resolution import resolve
from parity.services.ingest.openai_errors import HttpError


def test_the_header_names_the_thread_and_overrides_the_slugs() -> None:
    slug = encode(SessionRef("episode", thread_id="orchestrator"))
    assert resolve(slug, SessionHeaders(), {})[0].thread_id == "orchestrator"
    headers = SessionHeaders.read({b"x-parity-thread": b"researcher "})
    session, _ = resolve(slug, headers, {})
    assert (session.session_id, session.thread_id) == ("episode", "researcher")
    # An empty header is no header.
    assert (
        resolve("episode", SessionHeaders.read({b"x-parity-thread": b" "}), {})[0].thread_id == ""
    )


@pytest.mark.parametrize(("value", "message"), [
    (b"a\x01b", "X-Parity-Thread 'a\\x01b' contains a control character"),
    (b"w" * 257, "X-Parity-Thread is 257 characters"),
    (b"\xff", "X-Parity-Thread is not valid UTF-8"),
])  # fmt: skip
def test_a_bad_thread_is_a_400_naming_the_header(value: bytes, message: str) -> None:
    with pytest.raises(HttpError) as refused:
        resolve("episode", SessionHeaders.read({b"x-parity-thread": value}), {})
    assert (refused.value.status, refused.value.param) == (400, "X-Parity-Thread")
    assert message in refused.value.message

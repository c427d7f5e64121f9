"""The official OpenAI clients, pointed at ingest, carrying the current session in every call.

The session is read when each request is sent, not when the client is made: one
client serves every session, in every task and thread, and a call made inside
`parity.session(...)` lands in that session.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai

from parity.config import current_config
from parity.core import session_slug
from parity.sessions import current_session


def _route(request: httpx.Request) -> None:
    """Rewrite `/v1/...` to `/sessions/{slug}/v1/...` for the session active now."""
    ref = current_session()
    path = request.url.path
    if ref is None or path.startswith("/sessions/") or not path.startswith("/v1/"):
        return
    request.url = request.url.copy_with(path=f"/sessions/{session_slug.encode(ref)}{path}")


class _SessionTransport(httpx.BaseTransport):
    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        _route(request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class _AsyncSessionTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        _route(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def get_chat_client(ingest_url: str | None = None, **openai_kwargs: Any) -> openai.OpenAI:
    """An `openai.OpenAI` client whose calls go through ingest, in the current session."""
    config = current_config()
    transport = _SessionTransport(
        httpx.HTTPTransport(
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100)
        )
    )
    return openai.OpenAI(
        base_url=f"{(ingest_url or config.ingest_url).rstrip('/')}/v1",
        api_key=openai_kwargs.pop("api_key", config.api_key),
        # openai accepts an httpx client as well as an httpx2 one (_httpx2.is_legacy_httpx_*), but annotates only httpx2.
        http_client=httpx.Client(transport=transport, timeout=openai_kwargs.pop("timeout", 600.0)),  # type: ignore[arg-type]
        **openai_kwargs,
    )


def get_async_chat_client(
    ingest_url: str | None = None, **openai_kwargs: Any
) -> openai.AsyncOpenAI:
    """An `openai.AsyncOpenAI` client whose calls go through ingest, in the current session."""
    config = current_config()
    transport = _AsyncSessionTransport(
        httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100)
        )
    )
    return openai.AsyncOpenAI(
        base_url=f"{(ingest_url or config.ingest_url).rstrip('/')}/v1",
        api_key=openai_kwargs.pop("api_key", config.api_key),
        # openai accepts an httpx client as well as an httpx2 one (_httpx2.is_legacy_httpx_*), but annotates only httpx2.
        http_client=httpx.AsyncClient(
            transport=transport, timeout=openai_kwargs.pop("timeout", 600.0)
        ),  # type: ignore[arg-type]
        **openai_kwargs,
    )

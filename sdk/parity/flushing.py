"""Waiting until ingest has stored every LLM call made so far: `parity.flush()`.

A reward names a session or a call, and the store refuses one it has not seen; a
closed session is assembled from the calls the store holds. Ingest may still hold an
answered call (durability "after", or a store outage under "before"), so `reward()`
and the engine flush first, and so should code that closes sessions itself.
"""

from __future__ import annotations

import asyncio
import threading

import httpx

from parity.config import current_config

FLUSH_PATH = "/parity/v1/flush"
# The HTTP request outlives ingest's own wait, so ingest is the one to say why it timed out.
_TRANSPORT_MARGIN_S = 10.0
_clients: dict[str, httpx.Client] = {}
_clients_lock = threading.Lock()


class FlushError(RuntimeError):
    """Ingest could not confirm that the calls made so far are in the token store."""


def flush(timeout_s: float | None = None) -> int:
    """Return once every call that ingest captured before now is in the token store.
    Returns how many calls ingest has captured; raises FlushError, with ingest's reason,
    if they are not all stored within `timeout_s` (the SDK's rpc_timeout_s by default)."""
    config = current_config()
    timeout_s = config.rpc_timeout_s if timeout_s is None else timeout_s
    url = f"{config.ingest_url}{FLUSH_PATH}"
    try:
        response = ingest_http_client(config.ingest_url).post(
            url, json={"timeout_s": timeout_s}, headers={"Authorization": f"Bearer {config.api_key}"},
            timeout=timeout_s + _TRANSPORT_MARGIN_S,
        )  # fmt: skip
    except httpx.HTTPError as error:
        raise FlushError(
            f"could not ask ingest at {url} to flush its captured calls: {error!r}"
        ) from None
    if response.status_code != 200:
        try:
            reason = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            reason = response.text[:500]
        raise FlushError(
            f"ingest at {url} did not flush its captured calls (HTTP {response.status_code}): {reason}"
        )
    return int(response.json()["captured"])


async def aflush(timeout_s: float | None = None) -> int:
    """`flush()` for async code, without blocking the event loop."""
    return await asyncio.to_thread(flush, timeout_s)


def ingest_http_client(ingest_url: str) -> httpx.Client:
    """One pooled HTTP client per ingest root, shared by the SDK's calls to ingest's own routes."""
    with _clients_lock:
        client = _clients.get(ingest_url)
        if client is None:
            client = _clients[ingest_url] = httpx.Client()
        return client

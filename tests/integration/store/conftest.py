"""Every conformance test runs against every backend: memory, SQLite and a real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from parity.services.store.backends import open_backend
from parity.services.store.token_store import TokenStore

BACKENDS = ["memory", "sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    return request.getfixturevalue("fresh_postgres_url")


@pytest.fixture
def open_store(backend_url: str) -> Callable[[], TokenStore]:
    """Opens a store on the test's backend; fast watch polling keeps tests quick."""

    def open_() -> TokenStore:
        return TokenStore(open_backend(backend_url), watch_poll_s=0.05, watch_heartbeat_s=0.3)

    return open_


@pytest.fixture
async def store(open_store: Callable[[], TokenStore]) -> AsyncIterator[TokenStore]:
    token_store = open_store()
    await token_store.start()
    yield token_store
    await token_store.stop()

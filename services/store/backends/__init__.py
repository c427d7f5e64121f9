"""Store backends, chosen by URL: sqlite:///PATH (default), memory://, postgresql://..."""

from __future__ import annotations

from parity.services.runtime.errors import InvalidArgument
from parity.services.store.backends.base import StoreBackend

SCHEMES = ("sqlite://", "memory://", "postgresql://")


def open_backend(url: str) -> StoreBackend:
    """Open (creating and migrating if needed) the backend a URL names."""
    if url.startswith("memory://"):
        from parity.services.store.backends.memory import MemoryBackend

        return MemoryBackend()
    if url.startswith("sqlite://"):
        from parity.services.store.backends.sqlite import SqliteBackend

        return SqliteBackend.from_url(url)
    if url.startswith("postgresql://"):
        from parity.services.store.backends.postgres import PostgresBackend

        return PostgresBackend.from_url(url)
    raise InvalidArgument(f"store URL must start with one of {SCHEMES}, got {url!r}")

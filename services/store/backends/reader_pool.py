"""The SQL backends' read connections: one per thread, so each thread's read
transaction (its snapshot) never shares a connection with another thread's."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class _Connection(Protocol):
    def close(self) -> None: ...


ConnectionT = TypeVar("ConnectionT", bound=_Connection)


class ReaderPool(Generic[ConnectionT]):
    def __init__(
        self,
        connect: Callable[[], ConnectionT],
        is_closed: Callable[[ConnectionT], bool] = lambda _: False,
    ) -> None:
        """`is_closed` says when a thread's connection is gone (a database restart) and
        the thread's next read opens a new one."""
        self._connect = connect
        self._is_closed = is_closed
        self._local = threading.local()
        self._connections: list[ConnectionT] = []
        self._lock = threading.Lock()

    def connection(self) -> ConnectionT:
        """This thread's connection, opened by its first read."""
        connection = getattr(self._local, "connection", None)
        if connection is None or self._is_closed(connection):
            connection = self._local.connection = self._connect()
            with self._lock:
                self._connections.append(connection)
        return connection

    def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()

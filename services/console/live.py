"""New calls as ingest captures them, for every open page at once.

One tail of the store's WatchCalls (from the latest call, so a store of a million calls
is not replayed) per console process, on a thread of its own since the typed client is
blocking; each message is fanned out to the pages listening over server-sent events.
A page does not get the calls themselves, only which sessions changed: it asks for the
rows it shows again. The tail runs while anyone listens, reconnecting while the store
is down, and pages learn that too.
"""

from __future__ import annotations

import asyncio
import html
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import structlog

from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import RPCError
from parity.services.console.upstream import Services

log = structlog.get_logger(__name__)

_RETRY_S = (0.5, 5.0)
_QUEUE = 64


@dataclass(frozen=True)
class Change:
    # "calls" (sessions changed), "down" (the store is unreachable; the tail retries) or "up" (back).
    kind: str
    session_ids: frozenset[str] = frozenset()
    detail: str = ""


class LiveCalls:
    def __init__(self, services: Services) -> None:
        self.services = services
        self._listeners: set[asyncio.Queue[Change]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Guards starting the tail against the tail ending for want of listeners.
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    async def changes(self, stopping: asyncio.Event) -> AsyncIterator[Change | None]:
        """Changes as they come; None every few seconds while nothing does, so the caller
        can write a keep-alive and notice a closed connection. Ends when `stopping` is set."""
        queue: asyncio.Queue[Change] = asyncio.Queue(_QUEUE)
        self._listeners.add(queue)
        self._start()
        try:
            while not stopping.is_set():
                try:
                    yield await asyncio.wait_for(queue.get(), timeout=5.0)
                except TimeoutError:
                    yield None
        finally:
            self._listeners.discard(queue)

    def stop(self) -> None:
        self._stopping.set()

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(
                target=self._tail, name="console-watch-calls", daemon=True
            )
            self._thread.start()

    def _idle(self) -> bool:
        """True, and the tail forgotten, when no page listens any more."""
        with self._lock:
            if self._listeners:
                return False
            self._thread = None
            return True

    def _tail(self) -> None:
        store = self.services.store
        delay = _RETRY_S[0]
        failed = False
        while not self._stopping.is_set():
            request = store_pb.WatchCallsRequest(from_latest=True, view=store_pb.CALL_VIEW_BASIC)
            try:
                for message in store.client.watch_calls(request):
                    delay = _RETRY_S[0]
                    if failed:
                        failed = False
                        self._publish(Change("up"))
                    # The store's heartbeat (every 10 s) brings the thread here even when idle.
                    if self._stopping.is_set() or self._idle():
                        return
                    if message.calls:
                        self._publish(
                            Change("calls", frozenset(c.session_id for c in message.calls))
                        )
            except RPCError as error:
                log.warning(
                    "watch_calls_failed", store=store.address, error=str(error), retry_in_s=delay
                )
                failed = True
                self._publish(Change("down", detail=str(store.failure(error))))
            self._stopping.wait(delay)
            delay = min(delay * 2, _RETRY_S[1])

    def _publish(self, change: Change) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._deliver, change)

    def _deliver(self, change: Change) -> None:
        for queue in list(self._listeners):
            if queue.full():
                # A page that stopped reading only needs to know something changed.
                queue.get_nowait()
            queue.put_nowait(change)


def event(change: Change) -> str:
    """The server-sent event a page's htmx listens for. `down` and `up` carry the HTML htmx
    swaps into the page's live line, escaped; `calls` only triggers a refresh."""
    if change.kind == "down":
        data = f'<span class="neg">Live feed paused: {html.escape(change.detail)}. Retrying.</span>'
    elif change.kind == "up":
        data = "Live: the store is back; sessions refresh as ingest captures calls."
    else:
        data = str(len(change.session_ids))
    return f"event: {change.kind}\ndata: {data.replace(chr(10), ' ')}\n\n"


def keep_alive() -> str:
    return f": {time.time():.0f}\n\n"

"""Reading stored calls back: reference chains, the decoded-call cache, rendering.

A stored call's prompt and request are splices of an earlier call of its trajectory
(its reference), which may itself be a splice. Each read runs in one backend snapshot,
with every reference row its calls splice against, so a delete committing halfway
through cannot leave a reference missing. Recently decoded calls are cached, so a
watcher reading turn N does not re-fetch and re-decode turns 1..N-1.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from parity.api.common.v1 import llm_call_pb2
from parity.services.store import call_codec
from parity.services.store.backends.base import StoreBackend
from parity.services.store.call_codec import CallTokens
from parity.services.store.records import CallRow


class LruCache:
    """A small LRU map of decoded calls; guarded by the caller where threads share it."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Any, CallTokens] = OrderedDict()

    def get(self, key: Any) -> CallTokens | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: Any, value: CallTokens) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)


@dataclass(frozen=True)
class References:
    """What decoding full calls needs beyond their own rows, read in their snapshot."""

    rows: dict[str, CallRow]
    """The calls' rows and every row their reference chains pass through."""
    tokens: dict[str, CallTokens]
    """Decoded tokens: cached references, then each call as it is decoded."""
    cache: LruCache
    """Where the calls, once decoded, are cached."""


class CallReader:
    def __init__(self, backend: StoreBackend, cache_size: int) -> None:
        self.backend = backend
        self._recent = LruCache(cache_size)
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Sessions were deleted and may come back under the same ids: decode nothing from before."""
        with self._lock:
            self._recent = LruCache(self._recent.capacity)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[LruCache]:
        """A backend snapshot, and the decoded-call cache to use with it: the one from
        before the snapshot began. A delete committing meanwhile replaces the cache, so
        calls decoded here from rows it removed stay out of the new one, where a call
        written later under the same id would read them."""
        cache = self._recent
        with self.backend.snapshot():
            yield cache

    def references(self, rows: list[CallRow], cache: LruCache) -> References:
        """Fetches the reference chains `rows` need; inside the snapshot `rows` came from."""
        known: dict[str, CallRow] = {row.call_id: row for row in rows}
        tokens: dict[str, CallTokens] = {}
        with self._lock:
            for row in rows:
                # Only references outside `rows`: every row itself is decoded below.
                if (
                    row.ref_call_id
                    and row.ref_call_id not in known
                    and (cached := cache.get(row.ref_call_id)) is not None
                ):
                    tokens[row.ref_call_id] = cached
        # Computed once: a union inside the comprehension would rebuild it per row.
        have = known.keys() | tokens.keys()
        missing = {r.ref_call_id for r in rows if r.ref_call_id and r.ref_call_id not in have}
        while missing:
            fetched = self.backend.get_call_rows(missing)
            if len(fetched) != len(missing):
                lost = sorted(missing - fetched.keys())
                raise RuntimeError(f"store is inconsistent: referenced calls {lost} are missing")
            known.update(fetched)
            missing = {
                r.ref_call_id for r in fetched.values()
                if r.ref_call_id and r.ref_call_id not in known and r.ref_call_id not in tokens
            }  # fmt: skip
        return References(known, tokens, cache)

    def render(
        self, rows: list[CallRow], references: References | None
    ) -> list[llm_call_pb2.LlmCall]:
        """The basic view of `rows` without references; full calls, decoded, with them."""
        if references is None:
            return [call_codec.basic_view(row) for row in rows]
        known, tokens = references.rows, references.tokens
        decoded: dict[str, llm_call_pb2.LlmCall] = {}

        def decode(call_id: str) -> None:
            # Iterative: walk up to the first decoded (or full) ancestor, then back down.
            chain = [known[call_id]]
            while (ref_id := chain[-1].ref_call_id) and ref_id not in tokens:
                chain.append(known[ref_id])
            for link in reversed(chain):
                if link.call_id not in tokens:
                    call = call_codec.decode_call(link, tokens.get(link.ref_call_id or ""))
                    decoded[link.call_id] = call
                    tokens[link.call_id] = CallTokens.of(call, link.ref_depth)

        for row in rows:
            if row.call_id not in decoded:
                decode(row.call_id)
        with self._lock:
            for row in rows:
                references.cache.put(row.call_id, tokens[row.call_id])
        return [decoded[row.call_id] for row in rows]

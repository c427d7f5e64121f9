"""The token store as the assembler uses it: Parity's asyncio store client, retried while the store is down.

Every store RPC the assembler makes is idempotent (rewards carry ids, closes and
metadata updates converge), so each is retried with backoff on UNAVAILABLE and
DEADLINE_EXCEEDED until `retry_s` runs out; then the caller gets `Unavailable`.
Other statuses become the domain error they stand for, with the store's message.
The watch of closes reconnects forever from its last cursor.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc
import structlog

from parity.api.common.v1 import llm_call_pb2, reward_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as pb
from parity.clients import AsyncStoreClient, RPCError
from parity.core import splice_delta
from parity.core.splice_delta import token_splice
from parity.services.runtime.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ParityError,
    ResourceExhausted,
    Unavailable,
)

log = structlog.get_logger(__name__)

Response = TypeVar("Response")
_RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_ERRORS: dict[grpc.StatusCode, type[ParityError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
}
_FIRST_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 2.0
# One call's own deadline; a store that answers nothing in this long is treated as down.
_CALL_TIMEOUT_S = 60.0
# Calls per BatchGetSessions response, to stay well under the message size limit: a
# full call of a long conversation runs to tens of KB, a spliced one to a few.
MAX_FULL_CALLS_PER_READ = 1000
MAX_SPLICED_CALLS_PER_READ = 10_000


class StoreClient:
    def __init__(self, address: str, *, retry_s: float, max_message_bytes: int) -> None:
        self.address = address
        self.retry_s = retry_s
        self._client = AsyncStoreClient(
            address, timeout_s=_CALL_TIMEOUT_S, retry_for_s=retry_s, retry_codes=_RETRIED, backoff_s=_FIRST_BACKOFF_S,
            max_backoff_s=_MAX_BACKOFF_S, max_message_bytes=max_message_bytes,
            options=[
                # Notice a store that vanished without closing the connection.
                ("grpc.keepalive_time_ms", 20_000),
                # Reconnect within a couple of seconds of the store coming back, not
                # after gRPC's default backoff of up to two minutes.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 2_000),
            ],
        )  # fmt: skip

    async def close(self) -> None:
        await self._client.close()

    async def close_session(
        self,
        session_id: str,
        outcome: session_pb2.SessionOutcome,
        error_message: str,
        metadata: dict[str, str],
    ) -> session_pb2.Session:
        request = pb.CloseSessionRequest(
            session_id=session_id, outcome=outcome, error_message=error_message, metadata=metadata
        )
        return (await self._call(self._client.close_session, request)).session

    async def write_rewards(self, rewards: Sequence[reward_pb2.Reward]) -> pb.WriteRewardsResponse:
        """Rewards must carry their ids, so a retry writes nothing twice."""
        return await self._call(self._client.write_rewards, pb.WriteRewardsRequest(rewards=rewards))

    async def get_session(self, session_id: str) -> session_pb2.Session:
        return (
            await self._call(self._client.get_session, pb.GetSessionRequest(session_id=session_id))
        ).session

    async def read_sessions(
        self,
        session_ids: Sequence[str],
        *,
        tokens_only: bool = False,
        call_counts: Mapping[str, int] | None = None,
    ) -> dict[str, pb.SessionContents]:
        """The sessions that exist, with their calls (token ids exact and complete) and
        rewards. `tokens_only` leaves out request JSON and ships prompts as the store
        keeps them, spliced, rebuilding them here: a fraction of the bytes for
        multi-turn sessions. Requests hold at most 1,000 sessions and, as far as
        `call_counts` tells, a bounded number of calls."""
        found: dict[str, pb.SessionContents] = {}
        view = pb.CALL_VIEW_SPLICED if tokens_only else pb.CALL_VIEW_FULL
        limit = MAX_SPLICED_CALLS_PER_READ if tokens_only else MAX_FULL_CALLS_PER_READ
        for chunk in _chunks(session_ids, call_counts or {}, limit):
            request = pb.BatchGetSessionsRequest(session_ids=chunk, view=view)
            response = await self._call(self._client.batch_get_sessions, request)
            for contents in response.sessions:
                rebuild_prompts(contents)
                found[contents.session.session_id] = contents
        return found

    async def update_metadata(self, updates: Sequence[pb.SessionMetadataUpdate]) -> int:
        request = pb.UpdateSessionMetadataRequest(updates=updates)
        return (await self._call(self._client.update_session_metadata, request)).updated_count

    async def watch_closed_sessions(
        self, cursor: str = ""
    ) -> AsyncIterator[tuple[list[session_pb2.Session], str]]:
        """Every close after the cursor, then new ones, forever; an empty list is a heartbeat."""
        backoff = _FIRST_BACKOFF_S
        while True:
            request = pb.WatchClosedSessionsRequest(cursor=cursor, max_batch_size=1000)
            try:
                async for response in self._client.watch_closed_sessions(request):
                    cursor = response.cursor
                    backoff = _FIRST_BACKOFF_S
                    yield list(response.sessions), cursor
            except RPCError as error:
                log.warning("store_watch_interrupted", address=self.address, code=error.code.name,
                            details=error.message, retry_in_s=backoff)  # fmt: skip
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    async def _call(self, method: Callable[[Any], Awaitable[Response]], request: Any) -> Response:
        try:
            return await method(request)
        except RPCError as error:
            if error.code in _RETRIED:
                raise Unavailable(f"token store at {self.address} unavailable for {self.retry_s:g} s "
                                  f"({error.code.name}: {error.message})") from None  # fmt: skip
            raise _ERRORS.get(error.code, Unavailable)(
                error.message or f"token store answered {error.code.name}"
            ) from None


def _chunks(
    session_ids: Sequence[str], call_counts: Mapping[str, int], max_calls: int
) -> Iterator[list[str]]:
    chunk: list[str] = []
    calls = 0
    for session_id in session_ids:
        count = call_counts.get(session_id, 1)
        if chunk and (len(chunk) == 1000 or calls + count > max_calls):
            yield chunk
            chunk, calls = [], 0
        chunk.append(session_id)
        calls += count
    if chunk:
        yield chunk


def rebuild_prompts(contents: pb.SessionContents) -> None:
    """Fill in every prompt the store sent as a splice of an earlier call, in commit order."""
    if not contents.prompt_splices:
        return
    splices = {splice.call_id: splice for splice in contents.prompt_splices}
    earlier: dict[str, llm_call_pb2.LlmCall] = {}
    for call in contents.calls:
        splice = splices.get(call.call_id)
        if splice is not None:
            base_call = earlier[splice.base_call_id]
            base = base_call.prompt_token_ids
            if splice.base_choice >= 0:
                base += base_call.choices[splice.base_choice].token_ids
            call.prompt_token_ids = splice_delta.decode(
                base,
                token_splice(
                    splice.prefix_token_count, splice.suffix_token_count, splice.middle_token_ids
                ),
            )
        earlier[call.call_id] = call
    del contents.prompt_splices[:]

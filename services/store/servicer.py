"""TokenStoreService over gRPC: converts protos to domain calls on TokenStore and back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import grpc

from parity.api.common.v1 import session_pb2
from parity.api.store.v1 import store_service_pb2 as pb
from parity.api.store.v1 import store_service_pb2_grpc as pb_grpc
from parity.services.store.records import MetadataUpdate, SessionQuery, SessionRow
from parity.services.store.token_store import TokenStore


def session_to_proto(row: SessionRow) -> session_pb2.Session:
    session = session_pb2.Session(
        session_id=row.session_id,
        parent_session_ids=row.parent_session_ids,
        metadata=row.metadata,
        # A row keeps the enums' numbers, as every backend stores them.
        state=cast(session_pb2.SessionState, row.state),
        outcome=cast(session_pb2.SessionOutcome, row.outcome),
        error_message=row.error_message,
        call_count=row.call_count,
        end_user_id=row.end_user_id,
        tags=row.tags,
    )
    session.create_time.FromNanoseconds(int(row.create_time * 1e9))
    session.update_time.FromNanoseconds(int(row.update_time * 1e9))
    if row.close_time is not None:
        session.close_time.FromNanoseconds(int(row.close_time * 1e9))
    return session


_READ_VIEWS = {pb.CALL_VIEW_FULL: "full", pb.CALL_VIEW_SPLICED: "spliced"}


class TokenStoreServicer(pb_grpc.TokenStoreServiceServicer):
    def __init__(self, store: TokenStore) -> None:
        self.store = store
        self._draining = False
        # The StreamWriteCalls handlers waiting for their client's next batch.
        self._waiting_reads: set[asyncio.Task[object]] = set()

    async def WriteCalls(
        self, request: pb.WriteCallsRequest, context: grpc.aio.ServicerContext
    ) -> pb.WriteCallsResponse:
        result = await self.store.write_calls(request.calls)
        return pb.WriteCallsResponse(
            written_count=result.written, duplicate_count=result.duplicates
        )

    async def StreamWriteCalls(
        self,
        request_iterator: AsyncIterator[pb.StreamWriteCallsRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.StreamWriteCallsResponse]:
        # One request at a time: a refused one raises here and ends the stream before
        # any request behind it is read.
        while (request := await self._next_unless_draining(context)) is not None:
            result = await self.store.write_calls(request.calls)
            yield pb.StreamWriteCallsResponse(
                written_count=result.written, duplicate_count=result.duplicates
            )

    async def _next_unless_draining(
        self, context: grpc.aio.ServicerContext
    ) -> pb.StreamWriteCallsRequest | None:
        """The stream's next request; None at its end, or once shutdown has begun. A
        write stream mostly waits for its client's next batch, and would otherwise hold
        shutdown for the whole grace period: drain() cancels the reads still waiting, and
        their clients open new streams on the next store. (Racing every read against a
        shutdown future instead costs a task and a wait per batch; see
        docs/design/store-writer-thread.md.)"""
        if self._draining:
            return None
        task = asyncio.current_task()
        assert task is not None
        self._waiting_reads.add(task)
        try:
            request = await context.read()
        except asyncio.CancelledError:
            if not self._draining:
                raise
            # A batch that arrived just as shutdown began goes unanswered, as one arriving
            # after it would; its client sends it again, and writes are idempotent.
            task.uncancel()
            return None
        finally:
            self._waiting_reads.discard(task)
        return None if request is grpc.aio.EOF else request

    def drain(self) -> None:
        """Shutdown has begun: end the watches, and the write streams waiting for their next batch."""
        self.store.drain()
        self._draining = True
        for task in self._waiting_reads:
            task.cancel()

    async def GetCall(
        self, request: pb.GetCallRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCallResponse:
        full = request.view != pb.CALL_VIEW_BASIC
        return pb.GetCallResponse(call=await self.store.get_call(request.call_id, full))

    async def ListCalls(
        self, request: pb.ListCallsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListCallsResponse:
        full = request.view in (pb.CALL_VIEW_FULL, pb.CALL_VIEW_SPLICED)
        calls, token = await self.store.list_calls(
            request.session_id, request.page_size, request.page_token, full
        )
        return pb.ListCallsResponse(calls=calls, next_page_token=token)

    async def WatchCalls(
        self, request: pb.WatchCallsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchCallsResponse]:
        full = request.view in (pb.CALL_VIEW_FULL, pb.CALL_VIEW_SPLICED)
        async for calls, cursor in self.store.watch_calls(
            request.cursor, full, request.max_batch_size, request.from_latest
        ):
            yield pb.WatchCallsResponse(calls=calls, cursor=cursor)

    async def WriteRewards(
        self, request: pb.WriteRewardsRequest, context: grpc.aio.ServicerContext
    ) -> pb.WriteRewardsResponse:
        result = await self.store.write_rewards(request.rewards)
        return pb.WriteRewardsResponse(
            written_count=result.written, duplicate_count=result.duplicates
        )

    async def ListRewards(
        self, request: pb.ListRewardsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRewardsResponse:
        rewards, token = await self.store.list_rewards(
            request.session_id, request.page_size, request.page_token
        )
        return pb.ListRewardsResponse(rewards=rewards, next_page_token=token)

    async def GetSession(
        self, request: pb.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetSessionResponse:
        return pb.GetSessionResponse(
            session=session_to_proto(await self.store.get_session(request.session_id))
        )

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSessionsResponse:
        query = SessionQuery(
            state=request.state or None, parent_session_id=request.parent_session_id or None,
            outcome=request.outcome or None, metadata=tuple(sorted(request.metadata.items())),
            session_id_prefix=request.session_id_prefix, end_user_id=request.end_user_id or None,
            tags=tuple(request.tags), newest_first=request.order == pb.SESSION_ORDER_NEWEST_FIRST,
        )  # fmt: skip
        rows, token = await self.store.list_sessions(query, request.page_size, request.page_token)
        return pb.ListSessionsResponse(
            sessions=[session_to_proto(r) for r in rows], next_page_token=token
        )

    async def CloseSession(
        self, request: pb.CloseSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CloseSessionResponse:
        row = await self.store.close_session(
            request.session_id, request.outcome, request.error_message, dict(request.metadata)
        )
        return pb.CloseSessionResponse(session=session_to_proto(row))

    async def WatchClosedSessions(
        self, request: pb.WatchClosedSessionsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchClosedSessionsResponse]:
        async for rows, cursor in self.store.watch_closed_sessions(
            request.cursor, request.max_batch_size
        ):
            yield pb.WatchClosedSessionsResponse(
                sessions=[session_to_proto(r) for r in rows], cursor=cursor
            )

    async def BatchGetSessions(
        self, request: pb.BatchGetSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.BatchGetSessionsResponse:
        view = _READ_VIEWS.get(request.view, "basic")
        contents, missing = await self.store.batch_get_sessions(request.session_ids, view)
        return pb.BatchGetSessionsResponse(
            sessions=[
                pb.SessionContents(
                    session=session_to_proto(c.session),
                    calls=c.calls,
                    rewards=c.rewards,
                    prompt_splices=[
                        pb.PromptSplice(
                            call_id=p.call_id,
                            base_call_id=p.base_call_id,
                            base_choice=p.base_choice,
                            prefix_token_count=p.prefix_tokens,
                            suffix_token_count=p.suffix_tokens,
                            middle_token_ids=p.middle,
                        )
                        for p in c.splices
                    ],
                )
                for c in contents
            ],  # fmt: skip
            missing_session_ids=missing,
        )

    async def UpdateSessionMetadata(
        self, request: pb.UpdateSessionMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateSessionMetadataResponse:
        updates = [
            MetadataUpdate(u.session_id, dict(u.metadata), list(u.remove_keys))
            for u in request.updates
        ]
        return pb.UpdateSessionMetadataResponse(
            updated_count=await self.store.update_session_metadata(updates)
        )

    async def DeleteSessions(
        self, request: pb.DeleteSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSessionsResponse:
        before = (
            request.updated_before.ToNanoseconds() / 1e9
            if request.HasField("updated_before")
            else None
        )
        deleted = await self.store.delete_sessions(request.session_ids, before, request.end_user_id)
        return pb.DeleteSessionsResponse(
            deleted_session_count=deleted.sessions, deleted_call_count=deleted.calls,
            deleted_reward_count=deleted.rewards,
        )  # fmt: skip

    async def GetStoreStats(
        self, request: pb.GetStoreStatsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetStoreStatsResponse:
        stats = await self.store.stats()
        return pb.GetStoreStatsResponse(
            backend=self.store.backend.name,
            session_count=stats.session_count,
            call_count=stats.call_count,
            reward_count=stats.reward_count,
            logical_token_count=stats.logical_token_count,
            bytes_on_disk=stats.bytes_on_disk,
            bytes_per_token=stats.bytes_on_disk / stats.logical_token_count
            if stats.logical_token_count
            else 0.0,
        )

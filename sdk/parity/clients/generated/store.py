"""Typed clients for `parity.api.store.v1.TokenStoreService`. Generated from protos/ by scripts/generate_protos.py. Do not edit."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator

from parity.api.store.v1 import store_service_pb2 as pb
from parity.api.store.v1 import store_service_pb2_grpc as pb_grpc
from parity.clients.aio import AsyncServiceClient
from parity.clients.base import ServiceClient, StreamCall


class TokenStoreClient(ServiceClient):
    """TokenStoreService over a shared channel. Unary calls have a deadline and are retried on
    UNAVAILABLE; every method raises parity.RPCError on failure."""

    def __init__(self, address: str, **options: object) -> None:
        super().__init__(pb_grpc.TokenStoreServiceStub, address, **options)  # type: ignore[arg-type]

    def write_calls(self, request: pb.WriteCallsRequest, timeout_s: float | None = None) -> pb.WriteCallsResponse:
        return self._unary("WriteCalls", request, timeout_s)

    def stream_write_calls(self, requests: Iterable[pb.StreamWriteCallsRequest], timeout_s: float | None = None) -> StreamCall[pb.StreamWriteCallsResponse]:
        return self._bidi("StreamWriteCalls", requests, timeout_s)

    def get_call(self, request: pb.GetCallRequest, timeout_s: float | None = None) -> pb.GetCallResponse:
        return self._unary("GetCall", request, timeout_s)

    def list_calls(self, request: pb.ListCallsRequest, timeout_s: float | None = None) -> pb.ListCallsResponse:
        return self._unary("ListCalls", request, timeout_s)

    def watch_calls(self, request: pb.WatchCallsRequest, timeout_s: float | None = None) -> Iterator[pb.WatchCallsResponse]:
        return self._stream("WatchCalls", request, timeout_s)

    def write_rewards(self, request: pb.WriteRewardsRequest, timeout_s: float | None = None) -> pb.WriteRewardsResponse:
        return self._unary("WriteRewards", request, timeout_s)

    def list_rewards(self, request: pb.ListRewardsRequest, timeout_s: float | None = None) -> pb.ListRewardsResponse:
        return self._unary("ListRewards", request, timeout_s)

    def get_session(self, request: pb.GetSessionRequest, timeout_s: float | None = None) -> pb.GetSessionResponse:
        return self._unary("GetSession", request, timeout_s)

    def list_sessions(self, request: pb.ListSessionsRequest, timeout_s: float | None = None) -> pb.ListSessionsResponse:
        return self._unary("ListSessions", request, timeout_s)

    def close_session(self, request: pb.CloseSessionRequest, timeout_s: float | None = None) -> pb.CloseSessionResponse:
        return self._unary("CloseSession", request, timeout_s)

    def watch_closed_sessions(self, request: pb.WatchClosedSessionsRequest, timeout_s: float | None = None) -> Iterator[pb.WatchClosedSessionsResponse]:
        return self._stream("WatchClosedSessions", request, timeout_s)

    def batch_get_sessions(self, request: pb.BatchGetSessionsRequest, timeout_s: float | None = None) -> pb.BatchGetSessionsResponse:
        return self._unary("BatchGetSessions", request, timeout_s)

    def update_session_metadata(self, request: pb.UpdateSessionMetadataRequest, timeout_s: float | None = None) -> pb.UpdateSessionMetadataResponse:
        return self._unary("UpdateSessionMetadata", request, timeout_s)

    def delete_sessions(self, request: pb.DeleteSessionsRequest, timeout_s: float | None = None) -> pb.DeleteSessionsResponse:
        return self._unary("DeleteSessions", request, timeout_s)

    def get_store_stats(self, request: pb.GetStoreStatsRequest, timeout_s: float | None = None) -> pb.GetStoreStatsResponse:
        return self._unary("GetStoreStats", request, timeout_s)


class AsyncTokenStoreClient(AsyncServiceClient):
    """TokenStoreService for asyncio code, on a channel of its own (`await client.close()`). Unary calls
    have a deadline and are retried (see parity.clients.aio); every method raises parity.RPCError."""

    def __init__(self, address: str, **options: object) -> None:
        super().__init__(pb_grpc.TokenStoreServiceStub, address, **options)  # type: ignore[arg-type]

    async def write_calls(self, request: pb.WriteCallsRequest, timeout_s: float | None = None) -> pb.WriteCallsResponse:
        return await self._unary("WriteCalls", request, timeout_s)

    async def get_call(self, request: pb.GetCallRequest, timeout_s: float | None = None) -> pb.GetCallResponse:
        return await self._unary("GetCall", request, timeout_s)

    async def list_calls(self, request: pb.ListCallsRequest, timeout_s: float | None = None) -> pb.ListCallsResponse:
        return await self._unary("ListCalls", request, timeout_s)

    def watch_calls(self, request: pb.WatchCallsRequest, timeout_s: float | None = None) -> AsyncIterator[pb.WatchCallsResponse]:
        return self._stream("WatchCalls", request, timeout_s)

    async def write_rewards(self, request: pb.WriteRewardsRequest, timeout_s: float | None = None) -> pb.WriteRewardsResponse:
        return await self._unary("WriteRewards", request, timeout_s)

    async def list_rewards(self, request: pb.ListRewardsRequest, timeout_s: float | None = None) -> pb.ListRewardsResponse:
        return await self._unary("ListRewards", request, timeout_s)

    async def get_session(self, request: pb.GetSessionRequest, timeout_s: float | None = None) -> pb.GetSessionResponse:
        return await self._unary("GetSession", request, timeout_s)

    async def list_sessions(self, request: pb.ListSessionsRequest, timeout_s: float | None = None) -> pb.ListSessionsResponse:
        return await self._unary("ListSessions", request, timeout_s)

    async def close_session(self, request: pb.CloseSessionRequest, timeout_s: float | None = None) -> pb.CloseSessionResponse:
        return await self._unary("CloseSession", request, timeout_s)

    def watch_closed_sessions(self, request: pb.WatchClosedSessionsRequest, timeout_s: float | None = None) -> AsyncIterator[pb.WatchClosedSessionsResponse]:
        return self._stream("WatchClosedSessions", request, timeout_s)

    async def batch_get_sessions(self, request: pb.BatchGetSessionsRequest, timeout_s: float | None = None) -> pb.BatchGetSessionsResponse:
        return await self._unary("BatchGetSessions", request, timeout_s)

    async def update_session_metadata(self, request: pb.UpdateSessionMetadataRequest, timeout_s: float | None = None) -> pb.UpdateSessionMetadataResponse:
        return await self._unary("UpdateSessionMetadata", request, timeout_s)

    async def delete_sessions(self, request: pb.DeleteSessionsRequest, timeout_s: float | None = None) -> pb.DeleteSessionsResponse:
        return await self._unary("DeleteSessions", request, timeout_s)

    async def get_store_stats(self, request: pb.GetStoreStatsRequest, timeout_s: float | None = None) -> pb.GetStoreStatsResponse:
        return await self._unary("GetStoreStats", request, timeout_s)

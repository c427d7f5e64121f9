"""Typed clients for `parity.api.assembler.v1.AssemblerService`. Generated from protos/ by scripts/generate_protos.py. Do not edit."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator

from parity.api.assembler.v1 import assembler_service_pb2 as pb
from parity.api.assembler.v1 import assembler_service_pb2_grpc as pb_grpc
from parity.clients.aio import AsyncServiceClient
from parity.clients.base import ServiceClient, StreamCall


class AssemblerClient(ServiceClient):
    """AssemblerService over a shared channel. Unary calls have a deadline and are retried on
    UNAVAILABLE; every method raises parity.RPCError on failure."""

    def __init__(self, address: str, **options: object) -> None:
        super().__init__(pb_grpc.AssemblerServiceStub, address, **options)  # type: ignore[arg-type]

    def report_reward(self, request: pb.ReportRewardRequest, timeout_s: float | None = None) -> pb.ReportRewardResponse:
        return self._unary("ReportReward", request, timeout_s)

    def close_session(self, request: pb.CloseSessionRequest, timeout_s: float | None = None) -> pb.CloseSessionResponse:
        return self._unary("CloseSession", request, timeout_s)

    def get_trajectory(self, request: pb.GetTrajectoryRequest, timeout_s: float | None = None) -> pb.GetTrajectoryResponse:
        return self._unary("GetTrajectory", request, timeout_s)

    def list_trajectories(self, request: pb.ListTrajectoriesRequest, timeout_s: float | None = None) -> pb.ListTrajectoriesResponse:
        return self._unary("ListTrajectories", request, timeout_s)

    def stream_batches(self, requests: Iterable[pb.StreamBatchesRequest], timeout_s: float | None = None) -> StreamCall[pb.StreamBatchesResponse]:
        return self._bidi("StreamBatches", requests, timeout_s)

    def release_batch(self, request: pb.ReleaseBatchRequest, timeout_s: float | None = None) -> pb.ReleaseBatchResponse:
        return self._unary("ReleaseBatch", request, timeout_s)

    def get_stats(self, request: pb.GetStatsRequest, timeout_s: float | None = None) -> pb.GetStatsResponse:
        return self._unary("GetStats", request, timeout_s)


class AsyncAssemblerClient(AsyncServiceClient):
    """AssemblerService for asyncio code, on a channel of its own (`await client.close()`). Unary calls
    have a deadline and are retried (see parity.clients.aio); every method raises parity.RPCError."""

    def __init__(self, address: str, **options: object) -> None:
        super().__init__(pb_grpc.AssemblerServiceStub, address, **options)  # type: ignore[arg-type]

    async def report_reward(self, request: pb.ReportRewardRequest, timeout_s: float | None = None) -> pb.ReportRewardResponse:
        return await self._unary("ReportReward", request, timeout_s)

    async def close_session(self, request: pb.CloseSessionRequest, timeout_s: float | None = None) -> pb.CloseSessionResponse:
        return await self._unary("CloseSession", request, timeout_s)

    async def get_trajectory(self, request: pb.GetTrajectoryRequest, timeout_s: float | None = None) -> pb.GetTrajectoryResponse:
        return await self._unary("GetTrajectory", request, timeout_s)

    async def list_trajectories(self, request: pb.ListTrajectoriesRequest, timeout_s: float | None = None) -> pb.ListTrajectoriesResponse:
        return await self._unary("ListTrajectories", request, timeout_s)

    async def release_batch(self, request: pb.ReleaseBatchRequest, timeout_s: float | None = None) -> pb.ReleaseBatchResponse:
        return await self._unary("ReleaseBatch", request, timeout_s)

    async def get_stats(self, request: pb.GetStatsRequest, timeout_s: float | None = None) -> pb.GetStatsResponse:
        return await self._unary("GetStats", request, timeout_s)

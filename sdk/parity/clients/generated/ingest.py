"""Typed clients for `parity.api.ingest.v1.IngestService`. Generated from protos/ by scripts/generate_protos.py. Do not edit."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from parity.api.ingest.v1 import ingest_service_pb2 as pb
from parity.api.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from parity.clients.aio import AsyncServiceClient
from parity.clients.base import ServiceClient


class IngestClient(ServiceClient):
    """IngestService over a shared channel. Unary calls have a deadline and are retried on
    UNAVAILABLE; every method raises parity.RPCError on failure."""

    def __init__(self, address: str, **options: object) -> None:
        super().__init__(pb_grpc.IngestServiceStub, address, **options)  # type: ignore[arg-type]

    def get_stats(self, request: pb.GetStatsRequest, timeout_s: float | None = None) -> pb.GetStatsResponse:
        return self._unary("GetStats", request, timeout_s)

    def list_replicas(self, request: pb.ListReplicasRequest, timeout_s: float | None = None) -> pb.ListReplicasResponse:
        return self._unary("ListReplicas", request, timeout_s)

    def pause_traffic(self, request: pb.PauseTrafficRequest, timeout_s: float | None = None) -> pb.PauseTrafficResponse:
        return self._unary("PauseTraffic", request, timeout_s)

    def resume_traffic(self, request: pb.ResumeTrafficRequest, timeout_s: float | None = None) -> pb.ResumeTrafficResponse:
        return self._unary("ResumeTraffic", request, timeout_s)

    def set_policy_version(self, request: pb.SetPolicyVersionRequest, timeout_s: float | None = None) -> pb.SetPolicyVersionResponse:
        return self._unary("SetPolicyVersion", request, timeout_s)

    def set_canary(self, request: pb.SetCanaryRequest, timeout_s: float | None = None) -> pb.SetCanaryResponse:
        return self._unary("SetCanary", request, timeout_s)


class AsyncIngestClient(AsyncServiceClient):
    """IngestService for asyncio code, on a channel of its own (`await client.close()`). Unary calls
    have a deadline and are retried (see parity.clients.aio); every method raises parity.RPCError."""

    def __init__(self, address: str, **options: object) -> None:
        super().__init__(pb_grpc.IngestServiceStub, address, **options)  # type: ignore[arg-type]

    async def get_stats(self, request: pb.GetStatsRequest, timeout_s: float | None = None) -> pb.GetStatsResponse:
        return await self._unary("GetStats", request, timeout_s)

    async def list_replicas(self, request: pb.ListReplicasRequest, timeout_s: float | None = None) -> pb.ListReplicasResponse:
        return await self._unary("ListReplicas", request, timeout_s)

    async def pause_traffic(self, request: pb.PauseTrafficRequest, timeout_s: float | None = None) -> pb.PauseTrafficResponse:
        return await self._unary("PauseTraffic", request, timeout_s)

    async def resume_traffic(self, request: pb.ResumeTrafficRequest, timeout_s: float | None = None) -> pb.ResumeTrafficResponse:
        return await self._unary("ResumeTraffic", request, timeout_s)

    async def set_policy_version(self, request: pb.SetPolicyVersionRequest, timeout_s: float | None = None) -> pb.SetPolicyVersionResponse:
        return await self._unary("SetPolicyVersion", request, timeout_s)

    async def set_canary(self, request: pb.SetCanaryRequest, timeout_s: float | None = None) -> pb.SetCanaryResponse:
        return await self._unary("SetCanary", request, timeout_s)

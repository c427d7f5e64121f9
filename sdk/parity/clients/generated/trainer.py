"""Typed clients for `parity.api.trainer.v1.TrainerService`. Generated from protos/ by scripts/generate_protos.py. Do not edit."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from parity.api.trainer.v1 import trainer_service_pb2 as pb
from parity.api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from parity.clients.aio import AsyncServiceClient
from parity.clients.base import ServiceClient


class TrainerClient(ServiceClient):
    """TrainerService over a shared channel. Unary calls have a deadline and are retried on
    UNAVAILABLE; every method raises parity.RPCError on failure."""

    def __init__(self, address: str, **options: object) -> None:
        super().__init__(pb_grpc.TrainerServiceStub, address, **options)  # type: ignore[arg-type]

    def get_status(self, request: pb.GetStatusRequest, timeout_s: float | None = None) -> pb.GetStatusResponse:
        return self._unary("GetStatus", request, timeout_s)

    def stream_metrics(self, request: pb.StreamMetricsRequest, timeout_s: float | None = None) -> Iterator[pb.StreamMetricsResponse]:
        return self._stream("StreamMetrics", request, timeout_s)

    def sync_weights(self, request: pb.SyncWeightsRequest, timeout_s: float | None = None) -> pb.SyncWeightsResponse:
        return self._unary("SyncWeights", request, timeout_s)

    def start_run(self, request: pb.StartRunRequest, timeout_s: float | None = None) -> pb.StartRunResponse:
        return self._unary("StartRun", request, timeout_s)

    def pause_run(self, request: pb.PauseRunRequest, timeout_s: float | None = None) -> pb.PauseRunResponse:
        return self._unary("PauseRun", request, timeout_s)

    def resume_run(self, request: pb.ResumeRunRequest, timeout_s: float | None = None) -> pb.ResumeRunResponse:
        return self._unary("ResumeRun", request, timeout_s)

    def stop_run(self, request: pb.StopRunRequest, timeout_s: float | None = None) -> pb.StopRunResponse:
        return self._unary("StopRun", request, timeout_s)

    def save_checkpoint(self, request: pb.SaveCheckpointRequest, timeout_s: float | None = None) -> pb.SaveCheckpointResponse:
        return self._unary("SaveCheckpoint", request, timeout_s)

    def list_checkpoints(self, request: pb.ListCheckpointsRequest, timeout_s: float | None = None) -> pb.ListCheckpointsResponse:
        return self._unary("ListCheckpoints", request, timeout_s)

    def export_policy(self, request: pb.ExportPolicyRequest, timeout_s: float | None = None) -> pb.ExportPolicyResponse:
        return self._unary("ExportPolicy", request, timeout_s)

    def list_runs(self, request: pb.ListRunsRequest, timeout_s: float | None = None) -> pb.ListRunsResponse:
        return self._unary("ListRuns", request, timeout_s)

    def get_run(self, request: pb.GetRunRequest, timeout_s: float | None = None) -> pb.GetRunResponse:
        return self._unary("GetRun", request, timeout_s)

    def list_run_metrics(self, request: pb.ListRunMetricsRequest, timeout_s: float | None = None) -> pb.ListRunMetricsResponse:
        return self._unary("ListRunMetrics", request, timeout_s)

    def get_step_batch(self, request: pb.GetStepBatchRequest, timeout_s: float | None = None) -> pb.GetStepBatchResponse:
        return self._unary("GetStepBatch", request, timeout_s)

    def list_trained_sessions(self, request: pb.ListTrainedSessionsRequest, timeout_s: float | None = None) -> pb.ListTrainedSessionsResponse:
        return self._unary("ListTrainedSessions", request, timeout_s)

    def write_validation_metrics(self, request: pb.WriteValidationMetricsRequest, timeout_s: float | None = None) -> pb.WriteValidationMetricsResponse:
        return self._unary("WriteValidationMetrics", request, timeout_s)

    def promote_policy(self, request: pb.PromotePolicyRequest, timeout_s: float | None = None) -> pb.PromotePolicyResponse:
        return self._unary("PromotePolicy", request, timeout_s)

    def rollback_policy(self, request: pb.RollbackPolicyRequest, timeout_s: float | None = None) -> pb.RollbackPolicyResponse:
        return self._unary("RollbackPolicy", request, timeout_s)

    def list_promotions(self, request: pb.ListPromotionsRequest, timeout_s: float | None = None) -> pb.ListPromotionsResponse:
        return self._unary("ListPromotions", request, timeout_s)


class AsyncTrainerClient(AsyncServiceClient):
    """TrainerService for asyncio code, on a channel of its own (`await client.close()`). Unary calls
    have a deadline and are retried (see parity.clients.aio); every method raises parity.RPCError."""

    def __init__(self, address: str, **options: object) -> None:
        super().__init__(pb_grpc.TrainerServiceStub, address, **options)  # type: ignore[arg-type]

    async def get_status(self, request: pb.GetStatusRequest, timeout_s: float | None = None) -> pb.GetStatusResponse:
        return await self._unary("GetStatus", request, timeout_s)

    def stream_metrics(self, request: pb.StreamMetricsRequest, timeout_s: float | None = None) -> AsyncIterator[pb.StreamMetricsResponse]:
        return self._stream("StreamMetrics", request, timeout_s)

    async def sync_weights(self, request: pb.SyncWeightsRequest, timeout_s: float | None = None) -> pb.SyncWeightsResponse:
        return await self._unary("SyncWeights", request, timeout_s)

    async def start_run(self, request: pb.StartRunRequest, timeout_s: float | None = None) -> pb.StartRunResponse:
        return await self._unary("StartRun", request, timeout_s)

    async def pause_run(self, request: pb.PauseRunRequest, timeout_s: float | None = None) -> pb.PauseRunResponse:
        return await self._unary("PauseRun", request, timeout_s)

    async def resume_run(self, request: pb.ResumeRunRequest, timeout_s: float | None = None) -> pb.ResumeRunResponse:
        return await self._unary("ResumeRun", request, timeout_s)

    async def stop_run(self, request: pb.StopRunRequest, timeout_s: float | None = None) -> pb.StopRunResponse:
        return await self._unary("StopRun", request, timeout_s)

    async def save_checkpoint(self, request: pb.SaveCheckpointRequest, timeout_s: float | None = None) -> pb.SaveCheckpointResponse:
        return await self._unary("SaveCheckpoint", request, timeout_s)

    async def list_checkpoints(self, request: pb.ListCheckpointsRequest, timeout_s: float | None = None) -> pb.ListCheckpointsResponse:
        return await self._unary("ListCheckpoints", request, timeout_s)

    async def export_policy(self, request: pb.ExportPolicyRequest, timeout_s: float | None = None) -> pb.ExportPolicyResponse:
        return await self._unary("ExportPolicy", request, timeout_s)

    async def list_runs(self, request: pb.ListRunsRequest, timeout_s: float | None = None) -> pb.ListRunsResponse:
        return await self._unary("ListRuns", request, timeout_s)

    async def get_run(self, request: pb.GetRunRequest, timeout_s: float | None = None) -> pb.GetRunResponse:
        return await self._unary("GetRun", request, timeout_s)

    async def list_run_metrics(self, request: pb.ListRunMetricsRequest, timeout_s: float | None = None) -> pb.ListRunMetricsResponse:
        return await self._unary("ListRunMetrics", request, timeout_s)

    async def get_step_batch(self, request: pb.GetStepBatchRequest, timeout_s: float | None = None) -> pb.GetStepBatchResponse:
        return await self._unary("GetStepBatch", request, timeout_s)

    async def list_trained_sessions(self, request: pb.ListTrainedSessionsRequest, timeout_s: float | None = None) -> pb.ListTrainedSessionsResponse:
        return await self._unary("ListTrainedSessions", request, timeout_s)

    async def write_validation_metrics(self, request: pb.WriteValidationMetricsRequest, timeout_s: float | None = None) -> pb.WriteValidationMetricsResponse:
        return await self._unary("WriteValidationMetrics", request, timeout_s)

    async def promote_policy(self, request: pb.PromotePolicyRequest, timeout_s: float | None = None) -> pb.PromotePolicyResponse:
        return await self._unary("PromotePolicy", request, timeout_s)

    async def rollback_policy(self, request: pb.RollbackPolicyRequest, timeout_s: float | None = None) -> pb.RollbackPolicyResponse:
        return await self._unary("RollbackPolicy", request, timeout_s)

    async def list_promotions(self, request: pb.ListPromotionsRequest, timeout_s: float | None = None) -> pb.ListPromotionsResponse:
        return await self._unary("ListPromotions", request, timeout_s)

"""TrainerService over gRPC: converts protos to calls on TrainingRuns and back."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from parity.api.trainer.v1 import promotion_pb2, run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as pb
from parity.api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from parity.services.runtime import page_tokens
from parity.services.trainer.checkpoints import CheckpointInfo
from parity.services.trainer.promotion.log import (
    CANARY,
    PROMOTED,
    REFUSED,
    ROLLED_BACK,
    PromotionRecord,
)
from parity.services.trainer.run_settings import RunSettings
from parity.services.trainer.run_status import RunState, RunStatus
from parity.services.trainer.step_metrics import StepRecord
from parity.services.trainer.training_runs import TrainingRuns
from parity.services.trainer.weight_sync import SyncResult

_STATES = {
    RunState.STARTING: run_pb2.RUN_STATE_STARTING,
    RunState.WAITING_FOR_DATA: run_pb2.RUN_STATE_WAITING_FOR_DATA,
    RunState.TRAINING: run_pb2.RUN_STATE_TRAINING,
    RunState.SYNCING: run_pb2.RUN_STATE_SYNCING,
    RunState.PAUSED: run_pb2.RUN_STATE_PAUSED,
    RunState.COMPLETED: run_pb2.RUN_STATE_COMPLETED,
    RunState.FAILED: run_pb2.RUN_STATE_FAILED,
    RunState.STOPPED: run_pb2.RUN_STATE_STOPPED,
}
_OUTCOMES = {
    PROMOTED: promotion_pb2.PROMOTION_OUTCOME_PROMOTED,
    REFUSED: promotion_pb2.PROMOTION_OUTCOME_REFUSED,
    ROLLED_BACK: promotion_pb2.PROMOTION_OUTCOME_ROLLED_BACK,
    CANARY: promotion_pb2.PROMOTION_OUTCOME_CANARY,
}
_METRICS_POLL_S = 1.0


def _timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def _duration(seconds: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromNanoseconds(int(seconds * 1e9))
    return duration


def run_to_proto(run: RunStatus) -> run_pb2.Run:
    return run_pb2.Run(
        run_id=run.run_id, config=run.settings.to_proto(), state=_STATES[run.state], step=run.step,
        policy_version=run.policy_version, error_message=run.error, start_time=_timestamp(run.start_time),
        update_time=_timestamp(run.update_time), plot_path=run.plot_path, served_model=run.served_model,
    )  # fmt: skip


def checkpoint_to_proto(checkpoint: CheckpointInfo) -> run_pb2.Checkpoint:
    return run_pb2.Checkpoint(
        checkpoint_id=checkpoint.checkpoint_id, run_id=checkpoint.run_id, step=checkpoint.step,
        policy_version=checkpoint.policy_version, path=str(checkpoint.path),
        create_time=_timestamp(checkpoint.create_time),
    )  # fmt: skip


def sync_to_proto(result: SyncResult) -> pb.SyncWeightsResponse:
    durations = result.durations_s
    return pb.SyncWeightsResponse(
        policy_version=result.policy_version,
        replicas=[
            pb.ReplicaSync(
                replica=r.replica,
                verified=r.verified,
                max_logprob_diff=r.max_logprob_diff,
                error_message=r.error,
            )
            for r in result.replicas
        ],  # fmt: skip
        max_logprob_diff=result.max_logprob_diff,
        durations=pb.SyncPhaseDurations(
            **{
                phase: _duration(durations.get(phase, 0.0))
                for phase in ("pause", "push", "verify", "resume", "total")
            }
        ),  # fmt: skip
        complete_time=_timestamp(result.complete_time),
    )


def metrics_to_proto(
    record: StepRecord, kind: pb.MetricsKind = pb.METRICS_KIND_TRAINING
) -> pb.StepMetrics:
    return pb.StepMetrics(run_id=record.run_id, step=record.step, time=_timestamp(record.time), values=record.values,
                          kind=kind)  # fmt: skip


def promotion_to_proto(record: PromotionRecord) -> promotion_pb2.Promotion:
    return promotion_pb2.Promotion(
        promotion_id=record.promotion_id, outcome=_OUTCOMES[record.outcome], run_id=record.run_id,
        checkpoint_id=record.checkpoint_id, policy_version=record.policy_version, metric=record.metric,
        baseline=record.baseline, candidate=record.candidate, margin=record.margin, reason=record.reason,
        max_logprob_diff=record.max_logprob_diff, create_time=_timestamp(record.create_time), path=record.path,
        canary_share=record.canary_share, served_model=record.served_model,
    )  # fmt: skip


class TrainerServicer(pb_grpc.TrainerServiceServicer):
    def __init__(self, runs: TrainingRuns) -> None:
        self.runs = runs

    async def GetStatus(
        self, request: pb.GetStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetStatusResponse:
        run, last_sync = await asyncio.to_thread(self.runs.status, request.run_id)
        response = pb.GetStatusResponse()
        if run is not None:
            response.run.CopyFrom(run_to_proto(run))
        if last_sync is not None:
            response.last_sync.CopyFrom(sync_to_proto(last_sync))
        return response

    async def StreamMetrics(
        self, request: pb.StreamMetricsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamMetricsResponse]:
        index = 0
        while True:
            records = await asyncio.to_thread(self.runs.metrics.since, index, _METRICS_POLL_S)
            index += len(records)
            for record in records:
                if record.step >= request.from_step and request.run_id in ("", record.run_id):
                    yield pb.StreamMetricsResponse(metrics=metrics_to_proto(record))

    async def SyncWeights(
        self, request: pb.SyncWeightsRequest, context: grpc.aio.ServicerContext
    ) -> pb.SyncWeightsResponse:
        return sync_to_proto(
            await asyncio.to_thread(
                self.runs.sync_weights, not request.skip_verification, request.run_id
            )
        )

    async def StartRun(
        self, request: pb.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.StartRunResponse:
        settings = (RunSettings.from_proto(request.config, self.runs.default_checkpoint_dir)
                    if request.HasField("config") else None)  # fmt: skip
        run = await asyncio.to_thread(
            self.runs.start_run, settings, request.resume_checkpoint_id, request.run_id
        )
        return pb.StartRunResponse(run=run_to_proto(run))

    async def PauseRun(
        self, request: pb.PauseRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.PauseRunResponse:
        return pb.PauseRunResponse(run=run_to_proto(self.runs.pause(request.run_id)))

    async def ResumeRun(
        self, request: pb.ResumeRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.ResumeRunResponse:
        return pb.ResumeRunResponse(run=run_to_proto(self.runs.resume(request.run_id)))

    async def StopRun(
        self, request: pb.StopRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.StopRunResponse:
        run, checkpoint = await asyncio.to_thread(self.runs.stop, request.run_id)
        response = pb.StopRunResponse(run=run_to_proto(run))
        if checkpoint is not None:
            response.checkpoint.CopyFrom(checkpoint_to_proto(checkpoint))
        return response

    async def SaveCheckpoint(
        self, request: pb.SaveCheckpointRequest, context: grpc.aio.ServicerContext
    ) -> pb.SaveCheckpointResponse:
        checkpoint = await asyncio.to_thread(self.runs.save_checkpoint, request.run_id)
        return pb.SaveCheckpointResponse(checkpoint=checkpoint_to_proto(checkpoint))

    async def ListCheckpoints(
        self, request: pb.ListCheckpointsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListCheckpointsResponse:
        found = self.runs.list_checkpoints(request.run_id)
        page, token = page_tokens.page_of(
            found, request.page_size, request.page_token, f"checkpoints:{request.run_id}"
        )
        return pb.ListCheckpointsResponse(
            checkpoints=[checkpoint_to_proto(c) for c in page], next_page_token=token
        )

    async def ListRuns(
        self, request: pb.ListRunsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRunsResponse:
        runs = await asyncio.to_thread(self.runs.list_runs)
        page, token = page_tokens.page_of(runs, request.page_size, request.page_token, "runs")
        return pb.ListRunsResponse(runs=[run_to_proto(r) for r in page], next_page_token=token)

    async def GetRun(
        self, request: pb.GetRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetRunResponse:
        return pb.GetRunResponse(
            run=run_to_proto(await asyncio.to_thread(self.runs.get_run, request.run_id))
        )

    async def ListRunMetrics(
        self, request: pb.ListRunMetricsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRunMetricsResponse:
        kind = request.kind or pb.METRICS_KIND_TRAINING
        validation = kind == pb.METRICS_KIND_VALIDATION
        records = await asyncio.to_thread(self.runs.run_metrics, request.run_id, validation)
        page, token = page_tokens.page_of(
            records, request.page_size, request.page_token, f"metrics:{request.run_id}:{kind}"
        )
        return pb.ListRunMetricsResponse(
            metrics=[metrics_to_proto(r, kind) for r in page], next_page_token=token
        )

    async def GetStepBatch(
        self, request: pb.GetStepBatchRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetStepBatchResponse:
        return pb.GetStepBatchResponse(
            batch=await asyncio.to_thread(self.runs.step_batch, request.run_id, request.step)
        )

    async def ListTrainedSessions(
        self, request: pb.ListTrainedSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTrainedSessionsResponse:
        session_ids = list(request.session_ids)
        steps = await asyncio.to_thread(
            self.runs.trained_sessions, request.end_user_id, session_ids
        )
        # A token is bound to its query; the query's ids can be 1,000 of 256 characters, so by their digest.
        query = hashlib.sha256(
            "\x1f".join([request.end_user_id, *sorted(session_ids)]).encode()
        ).hexdigest()[:32]
        page, token = page_tokens.page_of(
            steps, request.page_size, request.page_token, f"lineage:{query}"
        )
        return pb.ListTrainedSessionsResponse(steps=page, next_page_token=token)

    async def WriteValidationMetrics(
        self, request: pb.WriteValidationMetricsRequest, context: grpc.aio.ServicerContext
    ) -> pb.WriteValidationMetricsResponse:
        record = await asyncio.to_thread(
            self.runs.write_validation, request.run_id, request.step, dict(request.values)
        )
        return pb.WriteValidationMetricsResponse(
            metrics=metrics_to_proto(record, pb.METRICS_KIND_VALIDATION)
        )

    async def ExportPolicy(
        self, request: pb.ExportPolicyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExportPolicyResponse:
        path, merged, checkpoint = await asyncio.to_thread(
            self.runs.export_policy,
            request.output_dir,
            request.checkpoint_id,
            request.merge_lora,
        )
        return pb.ExportPolicyResponse(
            path=str(path),
            checkpoint=checkpoint_to_proto(checkpoint),
            merged_path=str(merged or ""),
        )

    async def PromotePolicy(
        self, request: pb.PromotePolicyRequest, context: grpc.aio.ServicerContext
    ) -> pb.PromotePolicyResponse:
        record = await asyncio.to_thread(
            self.runs.promote,
            request.run_id,
            request.checkpoint_id,
            request.metric,
            request.margin,
            request.canary_share,
            request.served_model,
        )
        return pb.PromotePolicyResponse(promotion=promotion_to_proto(record))

    async def RollbackPolicy(
        self, request: pb.RollbackPolicyRequest, context: grpc.aio.ServicerContext
    ) -> pb.RollbackPolicyResponse:
        return pb.RollbackPolicyResponse(
            promotion=promotion_to_proto(
                await asyncio.to_thread(self.runs.promotions.rollback, request.served_model)
            )
        )

    async def ListPromotions(
        self, request: pb.ListPromotionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPromotionsResponse:
        records = await asyncio.to_thread(self.runs.promotions.decisions)
        page, token = page_tokens.page_of(
            records, request.page_size, request.page_token, "promotions"
        )
        return pb.ListPromotionsResponse(
            promotions=[promotion_to_proto(r) for r in page], next_page_token=token
        )

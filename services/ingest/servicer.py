"""IngestService over gRPC: converts protos to IngestControl calls and back."""

from __future__ import annotations

import grpc

from parity.api.ingest.v1 import ingest_service_pb2 as pb
from parity.api.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from parity.api.ingest.v1 import replica_pb2
from parity.services.ingest.control import IngestControl
from parity.services.runtime.page_tokens import page_of

DEFAULT_DRAIN_TIMEOUT_S = 60.0


class IngestServicer(pb_grpc.IngestServiceServicer):
    def __init__(self, control: IngestControl) -> None:
        self.control = control

    async def GetStats(
        self, request: pb.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetStatsResponse:
        stats = self.control.stats()
        response = pb.GetStatsResponse(
            request_count=stats.request_count, error_count=stats.error_count, in_flight=stats.in_flight, held=stats.held,
            capture_queue_depth=stats.capture_queue_depth, spool_size=stats.spool_size,
            captured_call_count=stats.captured_call_count, paused=stats.paused, policy_version=stats.policy_version,
            policy_model=stats.policy_model, lora_adapter=stats.lora_adapter, joining=stats.joining,
            canary_share=stats.canary_share, canary_policy_version=stats.canary_policy_version,
            canary_upstreams=stats.canary_upstreams,
            routes=[pb.PolicyRoute(policy_model=r.policy_model, lora_adapter=r.lora_adapter,
                                   policy_version=r.policy_version, paused=r.paused) for r in stats.routes],
        )  # fmt: skip
        response.start_time.FromNanoseconds(int(stats.start_time * 1e9))
        return response

    async def ListReplicas(
        self, request: pb.ListReplicasRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListReplicasResponse:
        matching, next_token = page_of(self.control.replicas(request.model), request.page_size, request.page_token,
                                       f"replicas:{request.model}")  # fmt: skip
        replicas = []
        for r in matching:
            replica = replica_pb2.Replica(
                name=r.name, models=sorted(r.models), base_url=r.base_url, in_flight=r.in_flight,
                request_count=r.request_count, error_count=r.error_count,
                health=replica_pb2.REPLICA_HEALTH_HEALTHY if r.healthy else replica_pb2.REPLICA_HEALTH_UNHEALTHY,
            )  # fmt: skip
            if r.last_check:
                replica.last_health_check_time.FromNanoseconds(int(r.last_check * 1e9))
            replicas.append(replica)
        return pb.ListReplicasResponse(replicas=replicas, next_page_token=next_token)

    async def PauseTraffic(
        self, request: pb.PauseTrafficRequest, context: grpc.aio.ServicerContext
    ) -> pb.PauseTrafficResponse:
        timeout = (
            request.drain_timeout.ToNanoseconds() / 1e9
            if request.HasField("drain_timeout")
            else DEFAULT_DRAIN_TIMEOUT_S
        )
        drained, paused_at = await self.control.pause(timeout, request.policy_model)
        response = pb.PauseTrafficResponse(drained_count=drained)
        response.pause_time.FromNanoseconds(int(paused_at * 1e9))
        return response

    async def ResumeTraffic(
        self, request: pb.ResumeTrafficRequest, context: grpc.aio.ServicerContext
    ) -> pb.ResumeTrafficResponse:
        response = pb.ResumeTrafficResponse()
        response.paused_duration.FromNanoseconds(
            int(self.control.resume(request.policy_model) * 1e9)
        )
        return response

    async def SetPolicyVersion(
        self, request: pb.SetPolicyVersionRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetPolicyVersionResponse:
        previous = self.control.set_policy_version(
            request.policy_version, request.policy_model, request.lora_adapter, request.route
        )
        return pb.SetPolicyVersionResponse(previous_policy_version=previous)

    async def SetCanary(
        self, request: pb.SetCanaryRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetCanaryResponse:
        await self.control.set_canary(
            list(request.upstreams), request.share, request.policy_version
        )
        return pb.SetCanaryResponse()

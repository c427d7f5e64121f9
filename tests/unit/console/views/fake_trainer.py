"""A trainer the console's run pages read: the typed client's methods, answering with real messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc
from starlette.testclient import TestClient

from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import RPCError
from parity.services.console.app import create_app
from parity.services.console.settings import ConsoleConfig
from parity.services.console.upstream import Services, Upstream


def run(
    run_id: str,
    state: run_pb2.RunState,
    step: int,
    served_model: str = "",
    total_steps: int = 6,
) -> run_pb2.Run:
    return run_pb2.Run(run_id=run_id, state=state, step=step, policy_version=step, served_model=served_model,
                       config=run_pb2.RunConfig(model_path="/models/tiny", total_steps=total_steps))  # fmt: skip


def steps(run_id: str, rewards: list[float], waits: list[float]) -> list[trainer_pb.StepMetrics]:
    return [trainer_pb.StepMetrics(run_id=run_id, step=n, values={"reward_mean": r, "reward_std": 0.1, "base_wait_seconds": w})
            for n, (r, w) in enumerate(zip(rewards, waits, strict=True), start=1)]  # fmt: skip


@dataclass
class FakeTrainer:
    runs: list[run_pb2.Run]
    """Newest first, as the trainer lists them."""
    training: dict[str, list[trainer_pb.StepMetrics]] = field(default_factory=dict)
    validation: dict[str, list[trainer_pb.StepMetrics]] = field(default_factory=dict)
    last_sync: dict[str, trainer_pb.SyncWeightsResponse] = field(default_factory=dict)
    status_asked: list[str] = field(default_factory=list)

    def list_runs(self, request: trainer_pb.ListRunsRequest) -> trainer_pb.ListRunsResponse:
        start = int(request.page_token or 0)
        end = start + (request.page_size or 100)
        return trainer_pb.ListRunsResponse(runs=self.runs[start:end],
                                           next_page_token=str(end) if end < len(self.runs) else "")  # fmt: skip

    def get_run(self, request: trainer_pb.GetRunRequest) -> trainer_pb.GetRunResponse:
        for found in self.runs:
            if found.run_id == request.run_id:
                return trainer_pb.GetRunResponse(run=found)
        raise RPCError(grpc.StatusCode.NOT_FOUND, f"this trainer has no run {request.run_id!r}")

    def list_run_metrics(
        self, request: trainer_pb.ListRunMetricsRequest
    ) -> trainer_pb.ListRunMetricsResponse:
        kind = (
            self.validation if request.kind == trainer_pb.METRICS_KIND_VALIDATION else self.training
        )
        return trainer_pb.ListRunMetricsResponse(metrics=kind.get(request.run_id, []))

    def get_status(self, request: trainer_pb.GetStatusRequest) -> trainer_pb.GetStatusResponse:
        self.status_asked.append(request.run_id)
        run_id = request.run_id or self.runs[0].run_id
        response = trainer_pb.GetStatusResponse(
            run=self.get_run(trainer_pb.GetRunRequest(run_id=run_id)).run
        )
        if run_id in self.last_sync:
            response.last_sync.CopyFrom(self.last_sync[run_id])
        return response


def get(trainer: FakeTrainer, path: str, page_size: int = 50) -> Any:
    """The console's answer to `path`, its trainer being `trainer` (the other services are never asked)."""
    nothing: Any = object()
    client: Any = trainer
    services = Services(Upstream("store", "-", nothing), Upstream("assembler", "-", nothing),
                        Upstream("trainer", "-", client))  # fmt: skip
    with TestClient(create_app(ConsoleConfig(port=0, page_size=page_size), services)) as http:
        return http.get(path)

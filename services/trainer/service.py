"""How `parity trainer serve` runs the TrainerService."""

from __future__ import annotations

from dataclasses import dataclass

from parity.api.trainer.v1 import trainer_service_pb2, trainer_service_pb2_grpc
from parity.services.runtime.config import ServerConfig, setting
from parity.services.runtime.server import ServiceBinding
from parity.services.runtime.service_definition import ServiceDefinition

FULL_NAME = trainer_service_pb2.DESCRIPTOR.services_by_name["TrainerService"].full_name
DEFAULT_PORT = 50054


@dataclass
class TrainerConfig(ServerConfig):
    port: int = setting(DEFAULT_PORT, "gRPC port; 0 picks a free one")


def build_bindings(config: TrainerConfig) -> list[ServiceBinding]:
    # The generated base servicer answers UNIMPLEMENTED for every RPC until the
    # trainer issue fills it in; health and reflection are real already.
    servicer = trainer_service_pb2_grpc.TrainerServiceServicer()
    return [
        ServiceBinding(
            FULL_NAME,
            lambda server: trainer_service_pb2_grpc.add_TrainerServiceServicer_to_server(servicer, server),
        )
    ]


DEFINITION = ServiceDefinition(
    name="trainer",
    description="Serve the verl trainer (runs, metrics, weight sync).",
    config_cls=TrainerConfig,
    build_bindings=build_bindings,
)

"""How `parity assembler serve` runs the AssemblerService."""

from __future__ import annotations

from dataclasses import dataclass

from parity.api.assembler.v1 import assembler_service_pb2, assembler_service_pb2_grpc
from parity.services.runtime.config import ServerConfig, setting
from parity.services.runtime.server import ServiceBinding
from parity.services.runtime.service_definition import ServiceDefinition

FULL_NAME = assembler_service_pb2.DESCRIPTOR.services_by_name["AssemblerService"].full_name
DEFAULT_PORT = 50053


@dataclass
class AssemblerConfig(ServerConfig):
    port: int = setting(DEFAULT_PORT, "gRPC port; 0 picks a free one")


def build_bindings(config: AssemblerConfig) -> list[ServiceBinding]:
    # The generated base servicer answers UNIMPLEMENTED for every RPC until the
    # assembler issue fills it in; health and reflection are real already.
    servicer = assembler_service_pb2_grpc.AssemblerServiceServicer()
    return [
        ServiceBinding(
            FULL_NAME,
            lambda server: assembler_service_pb2_grpc.add_AssemblerServiceServicer_to_server(servicer, server),
        )
    ]


DEFINITION = ServiceDefinition(
    name="assembler",
    description="Serve the trajectory assembler (samples and training batches).",
    config_cls=AssemblerConfig,
    build_bindings=build_bindings,
)

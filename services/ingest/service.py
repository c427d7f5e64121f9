"""How `parity ingest serve` runs the IngestService."""

from __future__ import annotations

from dataclasses import dataclass

from parity.api.ingest.v1 import ingest_service_pb2, ingest_service_pb2_grpc
from parity.services.runtime.config import ServerConfig, setting
from parity.services.runtime.server import ServiceBinding
from parity.services.runtime.service_definition import ServiceDefinition

FULL_NAME = ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"].full_name
DEFAULT_PORT = 50052


@dataclass
class IngestConfig(ServerConfig):
    port: int = setting(DEFAULT_PORT, "gRPC port; 0 picks a free one")


def build_bindings(config: IngestConfig) -> list[ServiceBinding]:
    # The generated base servicer answers UNIMPLEMENTED for every RPC until the
    # ingest issue fills it in; health and reflection are real already.
    servicer = ingest_service_pb2_grpc.IngestServiceServicer()
    return [
        ServiceBinding(
            FULL_NAME,
            lambda server: ingest_service_pb2_grpc.add_IngestServiceServicer_to_server(servicer, server),
        )
    ]


DEFINITION = ServiceDefinition(
    name="ingest",
    description="Serve the ingest control plane (the OpenAI-compatible proxy's operations).",
    config_cls=IngestConfig,
    build_bindings=build_bindings,
)

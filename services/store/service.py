"""How `parity store serve` runs the TokenStoreService."""

from __future__ import annotations

from dataclasses import dataclass

from parity.api.store.v1 import store_service_pb2, store_service_pb2_grpc
from parity.services.runtime.config import ServerConfig, setting
from parity.services.runtime.errors import InvalidArgument
from parity.services.runtime.server import ServiceBinding
from parity.services.runtime.service_definition import ServiceDefinition

FULL_NAME = store_service_pb2.DESCRIPTOR.services_by_name["TokenStoreService"].full_name
DEFAULT_PORT = 50051
BACKEND_SCHEMES = ("sqlite://", "memory://", "postgresql://")


@dataclass
class StoreConfig(ServerConfig):
    port: int = setting(DEFAULT_PORT, "gRPC port; 0 picks a free one")
    url: str = setting(
        "sqlite:///.parity/store.db",
        "backend URL: sqlite:///PATH (default), memory://, or postgresql://USER@HOST:PORT/DB",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.url.startswith(BACKEND_SCHEMES):
            raise InvalidArgument(f"url must start with one of {BACKEND_SCHEMES}, got {self.url!r}")


def build_bindings(config: StoreConfig) -> list[ServiceBinding]:
    # The generated base servicer answers UNIMPLEMENTED for every RPC until the
    # store issue fills it in; health and reflection are real already.
    servicer = store_service_pb2_grpc.TokenStoreServiceServicer()
    return [
        ServiceBinding(
            FULL_NAME,
            lambda server: store_service_pb2_grpc.add_TokenStoreServiceServicer_to_server(servicer, server),
        )
    ]


DEFINITION = ServiceDefinition(
    name="store",
    description="Serve the token store (calls, sessions, rewards).",
    config_cls=StoreConfig,
    build_bindings=build_bindings,
)

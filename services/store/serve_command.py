"""How `parity store serve` runs the TokenStoreService."""

from __future__ import annotations

from dataclasses import dataclass

from parity.api.store.v1 import store_service_pb2, store_service_pb2_grpc
from parity.core.settings_fields import setting
from parity.services.runtime.config import ServerConfig
from parity.services.runtime.errors import InvalidArgument
from parity.services.runtime.server import ServiceBinding
from parity.services.runtime.service_definition import ServiceDefinition
from parity.services.store.backends import SCHEMES, open_backend
from parity.services.store.servicer import TokenStoreServicer
from parity.services.store.token_store import TokenStore

FULL_NAME = store_service_pb2.DESCRIPTOR.services_by_name["TokenStoreService"].full_name
DEFAULT_PORT = 50051


@dataclass
class StoreConfig(ServerConfig):
    port: int = setting(DEFAULT_PORT, "gRPC port; 0 picks a free one")
    url: str = setting(
        "sqlite:///.parity/store.db",
        "backend URL: sqlite:///PATH (default), memory://, or postgresql://USER@HOST:PORT/DB",
    )
    retention_hours: float = setting(
        0.0, "delete sessions not updated for this many hours; 0 keeps everything"
    )
    trajectory_cache_size: int = setting(
        8192, "trajectories whose latest call is kept in memory for prefix deduplication"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.url.startswith(SCHEMES):
            raise InvalidArgument(f"url must start with one of {SCHEMES}, got {self.url!r}")
        if self.retention_hours < 0:
            raise InvalidArgument(f"retention_hours must be >= 0, got {self.retention_hours}")
        if self.trajectory_cache_size < 1:
            raise InvalidArgument(
                f"trajectory_cache_size must be >= 1, got {self.trajectory_cache_size}"
            )


def build_bindings(config: StoreConfig) -> list[ServiceBinding]:
    store = TokenStore(
        open_backend(config.url),
        trajectory_cache_size=config.trajectory_cache_size,
        retention_s=config.retention_hours * 3600 if config.retention_hours else None,
    )
    servicer = TokenStoreServicer(store)
    return [
        ServiceBinding(
            FULL_NAME,
            lambda server: store_service_pb2_grpc.add_TokenStoreServiceServicer_to_server(
                servicer, server
            ),
            on_start=store.start,
            on_stop=store.stop,
            on_drain=servicer.drain,
        )
    ]


DEFINITION = ServiceDefinition(
    name="store",
    description="Serve the token store (calls, sessions, rewards).",
    config_cls=StoreConfig,
    build_bindings=build_bindings,
)

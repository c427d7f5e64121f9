"""Typed clients for Parity's gRPC services.

Generated from the protos with the stubs they call (parity.clients.generated.<area>),
each service twice: a sync client over parity.clients.base (shared channels) and an
asyncio one over parity.clients.aio (a channel per client). Both give deadlines,
retries on UNAVAILABLE, and parity.RPCError.

    from parity.clients import StoreClient
    StoreClient("127.0.0.1:50051").get_call(GetCallRequest(call_id="..."))

    from parity.clients import AsyncStoreClient
    await AsyncStoreClient("127.0.0.1:50051").get_call(GetCallRequest(call_id="..."))
"""

from typing import TYPE_CHECKING

from parity.clients.errors import RPCError
from parity.clients.generated.assembler import AssemblerClient, AsyncAssemblerClient
from parity.clients.generated.ingest import AsyncIngestClient, IngestClient
from parity.clients.generated.store import TokenStoreClient as StoreClient
from parity.clients.generated.trainer import AsyncTrainerClient, TrainerClient
from parity.clients.store_writes import AsyncStoreClient

if TYPE_CHECKING:
    # Imported on first use below; named here so that type checkers know what it is.
    from parity.clients.health import HealthClient


def __getattr__(name: str) -> object:
    # grpc.health ships in grpcio-health-checking, a service extra: the SDK's base install, in an
    # agent's environment, has no such package and imports the clients all the same.
    if name == "HealthClient":
        from parity.clients.health import HealthClient

        return HealthClient
    raise AttributeError(f"module 'parity.clients' has no attribute {name!r}")


def admin_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata for ingest's control RPCs: `IngestClient(address, metadata=admin_metadata(token))`."""
    return (("authorization", f"Bearer {token}"),)


__all__ = [
    "AssemblerClient", "AsyncAssemblerClient", "AsyncIngestClient", "AsyncStoreClient", "AsyncTrainerClient",
    "HealthClient", "IngestClient", "RPCError", "StoreClient", "TrainerClient", "admin_metadata",
]  # fmt: skip

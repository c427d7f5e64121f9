"""gRPC's standard health service, which every Parity server answers."""

from __future__ import annotations

from grpc_health.v1 import health_pb2, health_pb2_grpc

from parity.clients.base import ServiceClient
from parity.clients.errors import RPCError


class HealthClient(ServiceClient):
    """`serving()` asks once, without retrying: callers waiting for a server to come up poll it."""

    def __init__(self, address: str, **options: object) -> None:
        super().__init__(health_pb2_grpc.HealthStub, address, **{"retries": 0, **options})  # type: ignore[arg-type]

    def serving(self, service: str = "", timeout_s: float | None = None) -> bool:
        """Whether the server (or one of its services, by full name) reports SERVING; False while unreachable."""
        try:
            response = self._unary(
                "Check", health_pb2.HealthCheckRequest(service=service), timeout_s
            )
        except RPCError:
            return False
        return response.status == health_pb2.HealthCheckResponse.SERVING

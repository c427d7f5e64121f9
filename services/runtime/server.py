"""The grpc.aio server every Parity service runs on.

It adds what each service would otherwise repeat: the error interceptor, the
standard health service, server reflection (so grpcurl's list and describe work),
deliberate message-size limits, and graceful shutdown on SIGTERM and SIGINT.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from parity.services.runtime.auth import AuthInterceptor, declared_roles, is_loopback
from parity.services.runtime.config import ServerConfig
from parity.services.runtime.errors import InvalidArgument, Unavailable
from parity.services.runtime.interceptor import ErrorInterceptor

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ServiceBinding:
    """One gRPC service to serve: its full proto name, how to register its servicer, and
    what its domain object needs done before the first RPC and after the last.

    `on_drain` runs as shutdown begins, before in-flight RPCs get the grace period: a
    stream that only waits for its client's next message ends there, rather than
    holding the whole grace period open."""

    full_name: str
    add_to_server: Callable[[grpc.aio.Server], None]
    on_start: Callable[[], Awaitable[None]] | None = None
    on_stop: Callable[[], Awaitable[None]] | None = None
    on_drain: Callable[[], None] | None = None


def server_credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    """TLS from the config's files, requiring client certificates when a client CA is set."""
    if not config.tls_cert_file:
        return None
    try:
        chain = Path(config.tls_cert_file).read_bytes()
        key = Path(config.tls_key_file).read_bytes()
        client_ca = (
            Path(config.tls_client_ca_file).read_bytes() if config.tls_client_ca_file else None
        )
    except OSError as error:
        raise InvalidArgument(
            f"cannot read a TLS file: {error.filename}: {error.strerror}"
        ) from None
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


class GrpcServer:
    def __init__(self, config: ServerConfig, bindings: Sequence[ServiceBinding]) -> None:
        self.config = config
        self.bindings = list(bindings)
        self.port: int | None = None
        self._health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    async def start(self) -> None:
        names = [b.full_name for b in self.bindings]
        # Every method must declare its role, whether or not this server checks them.
        roles = declared_roles(names)
        tokens = self.config.token_table()
        interceptors: list[grpc.aio.ServerInterceptor] = [ErrorInterceptor()]
        if tokens is not None:
            interceptors.append(AuthInterceptor(tokens, roles))
        elif not is_loopback(self.config.host):
            log.warning("unauthenticated", address=f"{self.config.host}:{self.config.port}",
                        reason="--insecure: anyone who can reach this port may call every method")  # fmt: skip
        # Created here rather than in __init__: a grpc.aio server binds to the running loop.
        self._server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", self.config.max_message_bytes),
                ("grpc.max_send_message_length", self.config.max_message_bytes),
                # One address per service: a second process on the same port is an
                # error, never a silent split of traffic.
                ("grpc.so_reuseport", 0),
            ],
        )
        # The port is taken before any binding starts, so a port in use fails before anything (ingest's HTTP
        # listener, its upstream sessions) would need undoing.
        try:
            address = f"{self.config.host}:{self.config.port}"
            credentials = server_credentials(self.config)
            self.port = (self._server.add_secure_port(address, credentials) if credentials
                         else self._server.add_insecure_port(address))  # fmt: skip
        except RuntimeError as error:
            raise Unavailable(
                f"cannot listen on {self.config.host}:{self.config.port}: {error}"
            ) from None
        started: list[ServiceBinding] = []
        try:
            for binding in self.bindings:
                if binding.on_start is not None:
                    await binding.on_start()
                started.append(binding)
                binding.add_to_server(self._server)
        except BaseException:
            for binding in reversed(started):
                if binding.on_stop is not None:
                    await binding.on_stop()
            raise
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection(
            [*names, health.SERVICE_NAME, reflection.SERVICE_NAME], self._server
        )
        await self._server.start()
        for name in ["", *names]:
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("listening", address=self.address, services=names, tls=bool(self.config.tls_cert_file),
                 authenticated=tokens is not None)  # fmt: skip

    async def stop(self) -> None:
        """Report NOT_SERVING, then give in-flight RPCs the grace period to finish."""
        if self._server is None:
            return
        await self._health.enter_graceful_shutdown()
        for binding in self.bindings:
            if binding.on_drain is not None:
                binding.on_drain()
        await self._server.stop(self.config.shutdown_grace_s)
        for binding in reversed(self.bindings):
            if binding.on_stop is not None:
                await binding.on_stop()
        log.info("stopped", address=self.address)

    async def serve_until_signalled(self) -> None:
        """Start, run until SIGTERM or SIGINT, then shut down gracefully."""
        stop_requested = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop_requested.set)
        await self.start()
        # Everything built at start lives until exit: keep it out of the collector's
        # generations so a full collection under load walks only request garbage.
        gc.collect()
        gc.freeze()
        await stop_requested.wait()
        log.info("shutdown_requested")
        await self.stop()

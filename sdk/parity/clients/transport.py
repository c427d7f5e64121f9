"""How a process reaches Parity's gRPC services: its bearer token and TLS files, one place for every channel.

Every client (the SDK's, and each service's calls to the others) opens its channels
here, so a token or a CA bundle set once applies to all of them:

    PARITY_TOKEN / PARITY_TOKEN_FILE   the bearer token sent on every call (a file is read at startup)
    PARITY_TLS_CA_FILE                 PEM CA bundle that signs the services' certificates: TLS on
    PARITY_TLS_CERT_FILE / _KEY_FILE   this process's client certificate, for services that require mTLS

The token travels as `authorization: Bearer TOKEN` metadata, added by a client
interceptor: gRPC refuses call credentials on a plaintext channel, and a loopback
deployment without TLS still authenticates.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

Options = Sequence[tuple[str, Any]]


class TransportError(ValueError):
    """A token or TLS file that cannot be used; the message names the variable."""


@dataclass(frozen=True)
class ChannelSecurity:
    # Never in the repr: reprs end up in logs and tracebacks.
    token: str = field(default="", repr=False)
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> ChannelSecurity:
        env = os.environ if environ is None else environ
        token = env.get("PARITY_TOKEN", "")
        if not token and env.get("PARITY_TOKEN_FILE"):
            token = _read(env["PARITY_TOKEN_FILE"], "PARITY_TOKEN_FILE").decode().strip()
        security = cls(token, env.get("PARITY_TLS_CA_FILE", ""), env.get("PARITY_TLS_CERT_FILE", ""),
                       env.get("PARITY_TLS_KEY_FILE", ""))  # fmt: skip
        if bool(security.tls_cert_file) != bool(security.tls_key_file):
            raise TransportError(
                "PARITY_TLS_CERT_FILE and PARITY_TLS_KEY_FILE go together: set both or neither"
            )
        return security

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def credentials(self) -> grpc.ChannelCredentials | None:
        if not self.tls_ca_file and not self.tls_cert_file:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.tls_ca_file, "PARITY_TLS_CA_FILE")
            if self.tls_ca_file
            else None,
            private_key=_read(self.tls_key_file, "PARITY_TLS_KEY_FILE")
            if self.tls_key_file
            else None,
            certificate_chain=_read(self.tls_cert_file, "PARITY_TLS_CERT_FILE")
            if self.tls_cert_file
            else None,
        )


def _read(path: str, variable: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise TransportError(f"{variable}={path!r} cannot be read: {error.strerror}") from None


_process_security: ChannelSecurity | None = None


def process_security() -> ChannelSecurity:
    """This process's token and TLS files, read from the environment once."""
    global _process_security
    if _process_security is None:
        _process_security = ChannelSecurity.from_environment()
    return _process_security


def set_process_security(security: ChannelSecurity) -> None:
    """Replace what channels opened from now on use (`parity.configure(token=...)` does this)."""
    global _process_security
    _process_security = security


def open_channel(
    address: str, options: Options = (), security: ChannelSecurity | None = None
) -> grpc.Channel:
    """A blocking channel that authenticates every call."""
    security = security or process_security()
    credentials = security.credentials()
    channel = (grpc.secure_channel(address, credentials, options=list(options)) if credentials
               else grpc.insecure_channel(address, options=list(options)))  # fmt: skip
    return (
        grpc.intercept_channel(channel, _SyncBearer(security.metadata))
        if security.token
        else channel
    )


def open_aio_channel(
    address: str, options: Options = (), security: ChannelSecurity | None = None
) -> grpc.aio.Channel:
    """An asyncio channel that authenticates every call."""
    security = security or process_security()
    credentials = security.credentials()
    interceptors = _aio_bearers(security.metadata) if security.token else None
    if credentials:
        return grpc.aio.secure_channel(
            address, credentials, options=list(options), interceptors=interceptors
        )
    return grpc.aio.insecure_channel(address, options=list(options), interceptors=interceptors)


class _SyncBearer(
    grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor,
):  # fmt: skip
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.extra = metadata

    def _call(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(
            details._replace(metadata=[*(details.metadata or ()), *self.extra]), request
        )

    def intercept_unary_unary(
        self,
        continuation: Callable[..., Any],
        client_call_details: grpc.ClientCallDetails,
        request: Any,
    ) -> Any:
        return self._call(continuation, client_call_details, request)

    def intercept_unary_stream(
        self,
        continuation: Callable[..., Any],
        client_call_details: grpc.ClientCallDetails,
        request: Any,
    ) -> Any:
        return self._call(continuation, client_call_details, request)

    def intercept_stream_unary(
        self,
        continuation: Callable[..., Any],
        client_call_details: grpc.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        return self._call(continuation, client_call_details, request_iterator)

    def intercept_stream_stream(
        self,
        continuation: Callable[..., Any],
        client_call_details: grpc.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        return self._call(continuation, client_call_details, request_iterator)


class _AioBearer:
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.extra = metadata

    async def _call(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        metadata = grpc.aio.Metadata(
            *(tuple(details.metadata) if details.metadata else ()), *self.extra
        )
        return await continuation(details._replace(metadata=metadata), request)


class _AioUnaryUnary(_AioBearer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(
        self,
        continuation: Callable[..., Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        return await self._call(continuation, client_call_details, request)


class _AioUnaryStream(_AioBearer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(
        self,
        continuation: Callable[..., Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        return await self._call(continuation, client_call_details, request)


class _AioStreamUnary(_AioBearer, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(
        self,
        continuation: Callable[..., Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        return await self._call(continuation, client_call_details, request_iterator)


class _AioStreamStream(_AioBearer, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(
        self,
        continuation: Callable[..., Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        return await self._call(continuation, client_call_details, request_iterator)


def _aio_bearers(metadata: tuple[tuple[str, str], ...]) -> list[grpc.aio.ClientInterceptor]:
    return [
        kind(metadata)
        for kind in (_AioUnaryUnary, _AioUnaryStream, _AioStreamUnary, _AioStreamStream)
    ]

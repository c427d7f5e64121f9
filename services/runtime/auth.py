"""Who may call what: bearer tokens mapped to roles, checked once per RPC for every service.

Each RPC declares the least role it needs beside its definition, as the proto method
option `parity.api.auth.v1.required_role`; roles are ordered (read < agent < service <
admin) and a token of a higher role may call what a lower one may. A token table is a
file of `ROLE TOKEN` lines, kept out of argv and logs. Health and reflection stay open:
load balancers and grpcurl's `list` need them without credentials.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import structlog
from google.protobuf import descriptor_pool

from parity.api.auth.v1 import auth_pb2
from parity.services.runtime.errors import InvalidArgument

log = structlog.get_logger(__name__)

ROLES = {"read": auth_pb2.ROLE_READ, "agent": auth_pb2.ROLE_AGENT, "service": auth_pb2.ROLE_SERVICE,
         "admin": auth_pb2.ROLE_ADMIN}  # fmt: skip
ROLE_NAMES = {value: name for name, value in ROLES.items()}
OPEN_PREFIXES = ("/grpc.health.", "/grpc.reflection.")
# Long enough that guessing is hopeless; `parity up` generates 43 characters.
MIN_TOKEN_CHARS = 16


def role_name(role: auth_pb2.Role) -> str:
    return ROLE_NAMES.get(role, "none")


@dataclass(frozen=True)
class TokenTable:
    """Tokens and their roles. Lookup compares against every token in constant time, so
    neither a match nor its position leaks through timing."""

    entries: tuple[tuple[bytes, auth_pb2.Role], ...]

    @classmethod
    def read(cls, path: str | Path) -> TokenTable:
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise InvalidArgument(
                f"auth_tokens_file {str(path)!r} cannot be read: {error.strerror}"
            ) from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, source: str = "auth_tokens_file") -> TokenTable:
        entries: list[tuple[bytes, auth_pb2.Role]] = []
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            role, _, token = line.partition(" ")
            token = token.strip()
            # The message names the line, never the token.
            if role not in ROLES:
                raise InvalidArgument(
                    f"{source} line {number}: role must be one of {', '.join(ROLES)}, got {role!r}"
                )
            if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
                raise InvalidArgument(
                    f"{source} line {number}: a token is at least {MIN_TOKEN_CHARS} characters without spaces"
                )
            if any(hmac.compare_digest(token.encode(), known) for known, _ in entries):
                raise InvalidArgument(f"{source} line {number}: the token is listed twice")
            entries.append((token.encode(), ROLES[role]))
        if not entries:
            raise InvalidArgument(f"{source} lists no tokens: expected lines of `ROLE TOKEN`")
        return cls(tuple(entries))

    def role_of(self, token: str) -> auth_pb2.Role:
        """The token's role, or ROLE_UNSPECIFIED for an unknown one."""
        found = auth_pb2.ROLE_UNSPECIFIED
        candidate = token.encode()
        for known, role in self.entries:
            if hmac.compare_digest(candidate, known):
                found = role
        return found


def read_secret(path: str, setting_name: str) -> str:
    """A secret kept in a file (never in argv); empty when `path` is."""
    if not path:
        return ""
    try:
        secret = Path(path).read_text().strip()
    except OSError as error:
        raise InvalidArgument(f"{setting_name} {path!r} cannot be read: {error.strerror}") from None
    if not secret:
        raise InvalidArgument(f"{setting_name} {path!r} is empty")
    return secret


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str) and value[:7].lower() == "bearer ":
            return value[7:].strip()
    return ""


def declared_roles(service_names: Iterable[str]) -> dict[str, auth_pb2.Role]:
    """`/package.Service/Method` -> the role its proto declares. Refuses a method that declares none."""
    pool = descriptor_pool.Default()
    roles: dict[str, auth_pb2.Role] = {}
    for service_name in service_names:
        for method in pool.FindServiceByName(service_name).methods:
            # protoc's .pyi types an extension as a plain FieldDescriptor, which protobuf's stubs do not take as a key.
            role: auth_pb2.Role = method.GetOptions().Extensions[auth_pb2.required_role]  # type: ignore[index]
            if role == auth_pb2.ROLE_UNSPECIFIED:
                raise InvalidArgument(
                    f"{method.full_name} declares no (parity.api.auth.v1.required_role)"
                )
            roles[f"/{service_name}/{method.name}"] = role
    return roles


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, tokens: TokenTable, roles: Mapping[str, auth_pb2.Role]) -> None:
        self.tokens = tokens
        self.roles = roles

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method = handler_call_details.method
        handler = await continuation(handler_call_details)
        if handler is None or method.startswith(OPEN_PREFIXES):
            return handler
        required = self.roles.get(method, auth_pb2.ROLE_UNSPECIFIED)
        token = bearer_token(handler_call_details.invocation_metadata)
        role = self.tokens.role_of(token) if token else auth_pb2.ROLE_UNSPECIFIED
        if role == auth_pb2.ROLE_UNSPECIFIED:
            why = "no bearer token" if not token else "an unknown token"
            return _refusal(handler, grpc.StatusCode.UNAUTHENTICATED,
                            f"{method} needs authorization: Bearer <token> (got {why})")  # fmt: skip
        if role < required:
            return _refusal(handler, grpc.StatusCode.PERMISSION_DENIED,
                            f"{method} needs the {role_name(required)} role; this token has {role_name(role)}")  # fmt: skip
        return handler


# Each kind of handler, and grpc's constructor for it.
_HANDLER_KINDS = {
    "unary_unary": grpc.unary_unary_rpc_method_handler,
    "unary_stream": grpc.unary_stream_rpc_method_handler,
    "stream_unary": grpc.stream_unary_rpc_method_handler,
    "stream_stream": grpc.stream_stream_rpc_method_handler,
}


def _refusal(
    handler: grpc.RpcMethodHandler[Any, Any], code: grpc.StatusCode, message: str
) -> grpc.RpcMethodHandler[Any, Any]:
    """The handler, its behavior replaced by the refusal: same kind, same response serializer."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        log.info("rpc_refused", code=code.name, reason=message)
        await context.abort(code, message)

    make = next(make for kind, make in _HANDLER_KINDS.items() if getattr(handler, kind))
    # The request is never read, so a caller without a token learns nothing from how its bytes decode.
    return make(refuse, None, handler.response_serializer)


def is_loopback(host: str) -> bool:
    """Whether a listen address is reachable from this machine only."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(
                ipaddress.ip_address(info[4][0]).is_loopback
                for info in socket.getaddrinfo(host, None)
            )
        except OSError:
            return False

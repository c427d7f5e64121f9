"""Tokens, roles and the loopback rule, without a server."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from google.protobuf import descriptor_pool

import parity.api
from parity.api.auth.v1 import auth_pb2
from parity.services.runtime.auth import TokenTable, bearer_token, declared_roles, is_loopback
from parity.services.runtime.config import ServerConfig
from parity.services.runtime.errors import InvalidArgument

READ, AGENT, ADMIN = "r" * 20, "a" * 20, "z" * 20


def every_service() -> list[str]:
    """Every service of every generated module, whether or not anything imported it yet."""
    modules = [importlib.import_module(m.name) for m in pkgutil.walk_packages(parity.api.__path__, "parity.api.")
               if m.name.endswith("_pb2")]  # fmt: skip
    return [
        service.full_name
        for module in modules
        for service in module.DESCRIPTOR.services_by_name.values()
    ]


def test_every_rpc_of_every_service_declares_a_role() -> None:
    services = every_service()
    assert {"parity.api.store.v1.TokenStoreService", "parity.api.ingest.v1.IngestService",
            "parity.api.assembler.v1.AssemblerService", "parity.api.trainer.v1.TrainerService"} <= set(services)  # fmt: skip
    roles = declared_roles(services)
    pool = descriptor_pool.Default()
    assert len(roles) == sum(len(pool.FindServiceByName(name).methods) for name in services)
    assert roles["/parity.api.store.v1.TokenStoreService/DeleteSessions"] == auth_pb2.ROLE_ADMIN
    assert roles["/parity.api.assembler.v1.AssemblerService/ReportReward"] == auth_pb2.ROLE_AGENT


def test_a_method_without_a_role_cannot_be_served() -> None:
    with pytest.raises(InvalidArgument, match="Check declares no"):
        declared_roles(["grpc.health.v1.Health"])


def test_tokens_map_to_roles_and_unknown_ones_to_none() -> None:
    table = TokenTable.parse(f"# ops\nread {READ}\n\nagent {AGENT}\nadmin {ADMIN}\n")
    assert table.role_of(READ) == auth_pb2.ROLE_READ and table.role_of(ADMIN) == auth_pb2.ROLE_ADMIN
    assert (
        table.role_of("x" * 20) == auth_pb2.ROLE_UNSPECIFIED
        and table.role_of("") == auth_pb2.ROLE_UNSPECIFIED
    )
    assert (
        bearer_token([("authorization", f"Bearer {AGENT}")]) == AGENT
        and bearer_token([("x", "y")]) == ""
    )


@pytest.mark.parametrize(("text", "fragment"), [
    ("root " + READ, "line 1: role must be one of read, agent, service, admin"),
    ("read short", "line 1: a token is at least 16 characters"),
    (f"read {READ}\nadmin {READ}", "line 2: the token is listed twice"),
    ("# nothing\n", "lists no tokens"),
])  # fmt: skip
def test_a_bad_token_table_is_refused_without_echoing_tokens(text: str, fragment: str) -> None:
    with pytest.raises(InvalidArgument, match=fragment) as raised:
        TokenTable.parse(text)
    assert READ not in str(raised.value)


def test_no_authentication_is_refused_off_loopback_unless_insecure(tmp_path) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("")
    ServerConfig(host="127.0.0.1")
    with pytest.raises(InvalidArgument, match="--auth-tokens-file .* or --insecure"):
        ServerConfig(host="0.0.0.0")
    ServerConfig(host="0.0.0.0", insecure=True)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"admin {ADMIN}\n")
    assert ServerConfig(host="0.0.0.0", auth_tokens_file=str(tokens)).token_table() is not None
    with pytest.raises(InvalidArgument, match="tls_cert_file and tls_key_file go together"):
        ServerConfig(tls_cert_file="cert.pem")

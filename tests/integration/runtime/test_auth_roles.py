"""Every RPC of every service, against the real services started with a token table: refused without a token
(UNAUTHENTICATED), refused with any lower role (PERMISSION_DENIED), let through with its own; health stays open.
Then TLS with client certificates, through the SDK's channels and the real grpcurl."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc

from parity.api.assembler.v1 import assembler_service_pb2
from parity.api.ingest.v1 import ingest_service_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.store.v1 import store_service_pb2_grpc as store_grpc
from parity.api.trainer.v1 import trainer_service_pb2
from parity.clients.transport import ChannelSecurity, open_channel
from parity.services.runtime.auth import ROLE_NAMES, declared_roles
from parity.services.stack.local_ca import LocalCertificateAuthority
from tests.conftest import free_port
from tests.integration.test_grpcurl import GRPCURL
from tests.waiting import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TOKENS = {role: f"{role}-token-{'x' * 16}" for role in ("read", "agent", "service", "admin")}
REFUSALS = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


@pytest.fixture(scope="module")
def token_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("auth") / "tokens"
    path.write_text("".join(f"{role} {token}\n" for role, token in TOKENS.items()))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def services(module_services, token_file, tmp_path_factory) -> dict[str, str]:
    """Each service's full name -> the address of a real process serving it, every one authenticating."""
    auth = ("--auth-tokens-file", str(token_file))
    work = tmp_path_factory.mktemp("auth-services")
    store = module_services.start("store", "--url", "memory://", *auth)
    assembler = module_services.start("assembler", "--store-address", store.address, *auth)
    ingest = module_services.start("ingest", "--upstreams", "http://127.0.0.1:9", "--store", store.address,
                                   "--spool-path", str(work / "spool.db"), "--http-port", str(free_port()), *auth)  # fmt: skip
    trainer = module_services.start("trainer", "--assembler-address", assembler.address, "--work-dir", str(work / "t"),
                                    *auth)  # fmt: skip
    return {store_pb.DESCRIPTOR.services_by_name["TokenStoreService"].full_name: store.address,
            assembler_service_pb2.DESCRIPTOR.services_by_name["AssemblerService"].full_name: assembler.address,
            ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"].full_name: ingest.address,
            trainer_service_pb2.DESCRIPTOR.services_by_name["TrainerService"].full_name: trainer.address}  # fmt: skip


def call(
    channel: grpc.Channel, method: str, streaming_request: bool, token: str | None
) -> grpc.StatusCode:
    """The status of calling `method` with an empty request; OK or a timeout means it was let through."""
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    try:
        # Bytes in, bytes out: no (de)serializers.
        if streaming_request:
            stream_stream: grpc.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(
                method
            )
            responses = stream_stream(iter([b""]), timeout=1.0, metadata=metadata)
        else:
            unary_stream: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(method)
            responses = unary_stream(b"", timeout=1.0, metadata=metadata)
        for _ in responses:
            break
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def test_every_method_needs_a_token_of_its_role(services) -> None:
    pool = descriptor_pool.Default()
    checked = 0
    for service, address in services.items():
        roles = declared_roles([service])
        with grpc.insecure_channel(address) as channel:
            for method in pool.FindServiceByName(service).methods:
                path = f"/{service}/{method.name}"
                required = roles[path]
                # Calling a unary method as a server stream is the same call on the wire.
                streaming = method.client_streaming
                assert call(channel, path, streaming, None) == grpc.StatusCode.UNAUTHENTICATED, path
                assert (
                    call(channel, path, streaming, "an-unknown-token-0123")
                    == grpc.StatusCode.UNAUTHENTICATED
                ), path
                for role, token in TOKENS.items():
                    code = call(channel, path, streaming, token)
                    if ROLE_NAMES[required] == role or list(TOKENS).index(role) > list(
                        TOKENS
                    ).index(ROLE_NAMES[required]):
                        assert code not in REFUSALS, (path, role, code)
                    else:
                        assert code == grpc.StatusCode.PERMISSION_DENIED, (path, role, code)
                checked += 1
            # types-grpcio-health-checking's HealthStub declares no methods.
            stub = health_pb2_grpc.HealthStub(channel)
            health = stub.Check(health_pb2.HealthCheckRequest(), timeout=5)  # type: ignore[attr-defined]
            assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert checked >= 40


def test_the_sdk_sends_its_token_and_the_refusal_names_the_role(services) -> None:
    address = services["parity.api.store.v1.TokenStoreService"]
    request = store_pb.DeleteSessionsRequest(session_ids=["nobody"])
    with (
        open_channel(address, security=ChannelSecurity(token=TOKENS["read"])) as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        store_grpc.TokenStoreServiceStub(channel).DeleteSessions(request, timeout=5)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "needs the admin role; this token has read" in (refused.value.details() or "")
    assert TOKENS["read"] not in (refused.value.details() or "")
    with open_channel(address, security=ChannelSecurity(token=TOKENS["admin"])) as channel:
        store_grpc.TokenStoreServiceStub(channel).DeleteSessions(request, timeout=5)
    # Without a token, even bytes that do not decode are refused for the token, not parsed.
    with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as garbage:
        get_call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            "/parity.api.store.v1.TokenStoreService/GetCall"
        )
        get_call(b"\xff\xff\xff", timeout=5)
    assert garbage.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_service_off_loopback_without_tokens_refuses_to_start() -> None:
    finished = subprocess.run([sys.executable, "-m", "parity.cli", "store", "serve", "--host", "0.0.0.0", "--port",
                               str(free_port()), "--url", "memory://"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert finished.returncode == 2
    assert (
        "--auth-tokens-file" in finished.stdout + finished.stderr
        and "--insecure" in finished.stdout + finished.stderr
    )


def test_tls_with_client_certificates_through_the_sdk_and_grpcurl(token_file, tmp_path) -> None:
    ca = LocalCertificateAuthority(tmp_path)
    ca_file = str(ca.ca_file)
    server_cert, server_key_file = ca.issue("store")
    client_cert, client_key_file = ca.issue("trainer")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "parity.cli", "store", "serve", "--port", str(port), "--url", "memory://",
         "--auth-tokens-file", str(token_file), "--tls-cert-file", server_cert, "--tls-key-file", server_key_file,
         "--tls-client-ca-file", ca_file],
        stdout=(tmp_path / "store.log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    trusted = ChannelSecurity(
        token=TOKENS["read"],
        tls_ca_file=ca_file,
        tls_cert_file=client_cert,
        tls_key_file=client_key_file,
    )
    try:

        def store_stats() -> store_pb.GetStoreStatsResponse | None:
            assert process.poll() is None, (tmp_path / "store.log").read_text()
            try:
                with open_channel(address, security=trusted) as channel:
                    return store_grpc.TokenStoreServiceStub(channel).GetStoreStats(
                        store_pb.GetStoreStatsRequest(), timeout=2
                    )
            except grpc.RpcError:
                return None

        stats = eventually(
            store_stats,
            interval_s=0.2,
            what=lambda: f"the store answering:\n{(tmp_path / 'store.log').read_text()}\n",
        )
        assert stats.session_count == 0
        # Without a client certificate the handshake fails; without TLS nothing is answered.
        for security in (
            ChannelSecurity(token=TOKENS["read"], tls_ca_file=ca_file),
            ChannelSecurity(token=TOKENS["read"]),
        ):
            with (
                open_channel(address, security=security) as channel,
                pytest.raises(grpc.RpcError) as refused,
            ):
                store_grpc.TokenStoreServiceStub(channel).GetStoreStats(
                    store_pb.GetStoreStatsRequest(), timeout=3
                )
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        grpcurl = subprocess.run(
            [str(GRPCURL), "-cacert", ca_file, "-cert", client_cert, "-key", client_key_file, "-H",
             f"authorization: Bearer {TOKENS['read']}", address, "parity.api.store.v1.TokenStoreService/GetStoreStats"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert grpcurl.returncode == 0, grpcurl.stderr
        json.loads(grpcurl.stdout)
    finally:
        process.terminate()
        process.wait(15)

"""The sync clients' bidirectional streams and health checks: errors as RPCError, no retries hiding a
server that is not up."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from parity.api.assembler.v1 import assembler_service_pb2 as pb
from parity.clients import AssemblerClient, HealthClient, RPCError
from tests.conftest import free_port


@pytest.fixture
def health_server() -> Iterator[tuple[str, health.HealthServicer]]:
    server = grpc.server(futures.ThreadPoolExecutor(2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(None)


def test_health_is_serving_only_once_the_server_says_so(health_server) -> None:
    address, servicer = health_server
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert not HealthClient(address).serving(timeout_s=5)
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    assert HealthClient(address).serving(timeout_s=5)
    assert not HealthClient(address).serving(
        "parity.api.store.v1.TokenStoreService", timeout_s=5
    ), "unknown service"
    assert not HealthClient(f"127.0.0.1:{free_port()}").serving(timeout_s=1)


def test_a_bidirectional_stream_that_cannot_connect_raises_one_rpc_error() -> None:
    call = AssemblerClient(f"127.0.0.1:{free_port()}").stream_batches(
        iter([pb.StreamBatchesRequest()]), timeout_s=5
    )
    with pytest.raises(RPCError) as raised:
        list(call)
    assert (
        raised.value.code == grpc.StatusCode.UNAVAILABLE and raised.value.method == "StreamBatches"
    )

"""The shared runtime, served in-process: error mapping, health, reflection, limits."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from parity.api.common.v1 import llm_call_pb2
from parity.api.store.v1 import store_service_pb2 as pb
from parity.api.store.v1 import store_service_pb2_grpc as pb_grpc
from parity.services.runtime.config import ServerConfig
from parity.services.runtime.errors import InvalidArgument, NotFound, Unavailable
from parity.services.runtime.server import GrpcServer, ServiceBinding


class ScriptedStore(pb_grpc.TokenStoreServiceServicer):
    """A servicer whose RPCs fail in the ways the interceptor must translate."""

    async def GetCall(self, request: pb.GetCallRequest, context) -> pb.GetCallResponse:
        if request.call_id == "missing":
            raise NotFound(f"call {request.call_id!r} does not exist")
        if request.call_id == "crash":
            raise RuntimeError("secret internal detail")
        return pb.GetCallResponse(call=llm_call_pb2.LlmCall(call_id=request.call_id))

    async def ListCalls(self, request: pb.ListCallsRequest, context) -> pb.ListCallsResponse:
        raise InvalidArgument("session_id is required")

    async def WriteCalls(self, request: pb.WriteCallsRequest, context) -> pb.WriteCallsResponse:
        return pb.WriteCallsResponse(written_count=len(request.calls))

    async def WatchCalls(
        self, request: pb.WatchCallsRequest, context
    ) -> AsyncIterator[pb.WatchCallsResponse]:
        yield pb.WatchCallsResponse(cursor="c1")
        raise Unavailable("store is restarting")

    async def StreamWriteCalls(
        self, request_iterator, context
    ) -> AsyncIterator[pb.StreamWriteCallsResponse]:
        async for request in request_iterator:
            yield pb.StreamWriteCallsResponse(written_count=len(request.calls))


@pytest.fixture
async def stub():
    config = ServerConfig(port=0, max_message_mb=1, shutdown_grace_s=0)
    server = GrpcServer(
        config,
        [
            ServiceBinding(
                "parity.api.store.v1.TokenStoreService",
                lambda s: pb_grpc.add_TokenStoreServiceServicer_to_server(ScriptedStore(), s),
            )
        ],
    )
    await server.start()
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield pb_grpc.TokenStoreServiceStub(channel), channel
    await server.stop()


async def _status(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def test_success_passes_through(stub) -> None:
    store, _ = stub
    response = await store.GetCall(pb.GetCallRequest(call_id="c1"))
    assert response.call.call_id == "c1"


async def test_domain_errors_become_status_codes_with_their_message(stub) -> None:
    store, _ = stub
    missing = await _status(store.GetCall(pb.GetCallRequest(call_id="missing")))
    assert (missing.code(), missing.details()) == (
        grpc.StatusCode.NOT_FOUND,
        "call 'missing' does not exist",
    )
    invalid = await _status(store.ListCalls(pb.ListCallsRequest()))
    assert (invalid.code(), invalid.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "session_id is required",
    )


async def test_unexpected_errors_are_internal_without_leaking_details(stub) -> None:
    store, _ = stub
    error = await _status(store.GetCall(pb.GetCallRequest(call_id="crash")))
    assert error.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in (error.details() or "") and "error id" in (error.details() or "")


async def test_unbuilt_rpcs_answer_unimplemented(stub) -> None:
    store, _ = stub
    error = await _status(store.CloseSession(pb.CloseSessionRequest(session_id="s")))
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "CloseSession is not implemented yet" in (error.details() or "")


async def test_streaming_errors_arrive_after_the_messages_sent(stub) -> None:
    store, _ = stub
    received = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for message in store.WatchCalls(pb.WatchCallsRequest()):
            received.append(message.cursor)
    assert received == ["c1"]
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_message_size_limit_is_enforced(stub) -> None:
    store, _ = stub
    oversized = pb.WriteCallsRequest(
        calls=[llm_call_pb2.LlmCall(prompt_token_ids=b"\0" * (2 * 1024 * 1024))]
    )
    error = await _status(store.WriteCalls(oversized))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_health_reports_serving_for_the_server_and_each_service(stub) -> None:
    _, channel = stub
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "parity.api.store.v1.TokenStoreService"):
        response = await health.Check(health_pb2.HealthCheckRequest(service=service))  # type: ignore[attr-defined]  # types-grpcio-health-checking's HealthStub declares no methods
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    unknown = await _status(health.Check(health_pb2.HealthCheckRequest(service="nope")))  # type: ignore[attr-defined]  # types-grpcio-health-checking's HealthStub declares no methods
    assert unknown.code() == grpc.StatusCode.NOT_FOUND


# A varint that never ends: no message type parses it.
UNDECODABLE = b"\xff" * 11


async def test_an_undecodable_request_is_invalid_argument_naming_its_type(stub) -> None:
    _, channel = stub
    raw = {"request_serializer": None, "response_deserializer": None}
    service = "/parity.api.store.v1.TokenStoreService"
    unary = await _status(channel.unary_unary(f"{service}/GetCall", **raw)(UNDECODABLE))
    assert unary.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (unary.details() or "").startswith(
        "the request could not be decoded as parity.api.store.v1.GetCallRequest"
    )
    with pytest.raises(grpc.aio.AioRpcError) as watched:
        async for _ in channel.unary_stream(f"{service}/WatchCalls", **raw)(UNDECODABLE):
            pass
    assert watched.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    health = await _status(channel.unary_unary("/grpc.health.v1.Health/Check", **raw)(UNDECODABLE))
    assert health.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_an_undecodable_message_in_a_request_stream_ends_it_after_the_good_ones(stub) -> None:
    _, channel = stub
    good = pb.StreamWriteCallsRequest(calls=[llm_call_pb2.LlmCall(call_id="c")]).SerializeToString()
    write = channel.stream_stream("/parity.api.store.v1.TokenStoreService/StreamWriteCalls")
    stream = write(iter([good, UNDECODABLE, good]))
    answers = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for answer in stream:
            answers.append(pb.StreamWriteCallsResponse.FromString(answer).written_count)
    assert answers == [1]
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "parity.api.store.v1.StreamWriteCallsRequest" in (caught.value.details() or "")

"""Every gRPC edge under fuzzing: real store, assembler, ingest and trainer processes get
Hypothesis-generated requests and raw random bytes, and never answer UNKNOWN or
INTERNAL, never exit, and lose nothing written before the fuzzing began.

What is fuzzed, and what is not:
- store (SQLite), assembler and ingest (its upstream a dead port): every RPC. A fuzzed
  DeleteSessions names sessions only: a random `updated_before` is a legitimate order
  to delete everything older, which would erase the data this test proves intact.
- trainer, with no vLLM replica and no model: every RPC but StartRun (it would train
  a fuzzed config), SyncWeights (it pushes weights to vLLM replicas) and ExportPolicy
  (it writes a checkpoint to a fuzzed directory). Those three still get undecodable
  bytes, as every method of every service does.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import numpy as np
import pytest
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.assembler.v1 import assembler_service_pb2_grpc as assembler_grpc
from parity.api.common.v1 import reward_pb2
from parity.api.ingest.v1 import ingest_service_pb2  # noqa: F401  (registers IngestService's descriptor)
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.store.v1 import store_service_pb2_grpc as store_grpc
from parity.api.trainer.v1 import trainer_service_pb2  # noqa: F401  (registers TrainerService's descriptor)
from parity.core import tokens
from tests.call_factory import make_call
from tests.conftest import free_port
from tests.integration.runtime.message_strategies import messages
from tests.integration.service_fixtures import RunningService, ServiceLauncher

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SERVICES = {
    "store": "parity.api.store.v1.TokenStoreService",
    "assembler": "parity.api.assembler.v1.AssemblerService",
    "ingest": "parity.api.ingest.v1.IngestService",
    "trainer": "parity.api.trainer.v1.TrainerService",
}
NOT_FUZZED = {"StartRun", "SyncWeights", "ExportPolicy"}
EXAMPLES_PER_SERVICE = 300
UNARY_TIMEOUT_S = 10.0
# A watch or batch stream waits for data that may never come: its first answer is enough.
STREAM_TIMEOUT_S = 0.5
FAILURES = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)
# A varint that never ends: no message type parses it.
UNDECODABLE = b"\xff" * 11
KEPT_SESSIONS = ("kept-session-0", "kept-session-1")


@dataclass
class Stack:
    services: dict[str, RunningService]
    channels: dict[str, grpc.Channel]
    kept: bytes


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data = tmp_path_factory.mktemp("fuzz")
    launcher = ServiceLauncher(data)
    try:
        store = launcher.start(
            "store", "--url", f"sqlite:///{data}/store.db", "--shutdown-grace-s", "0.5"
        )
        # Groups never fill or idle out: the data written below is never batched, so
        # nothing but fuzzing could change it.
        assembler = launcher.start("assembler", "--store-address", store.address, "--group-idle-s", "3600",
                                   "--shutdown-grace-s", "0.5")  # fmt: skip
        ingest = launcher.start("ingest", "--store", store.address, "--upstreams", "http://127.0.0.1:9",
                                "--http-port", str(free_port()), "--spool-path", str(data / "spool.db"))  # fmt: skip
        trainer = launcher.start("trainer", "--assembler-address", assembler.address,
                                 "--work-dir", str(data / "trainer"))  # fmt: skip
        services = {"store": store, "assembler": assembler, "ingest": ingest, "trainer": trainer}
        channels = {
            name: grpc.insecure_channel(service.address) for name, service in services.items()
        }
        yield Stack(services, channels, write_kept_data(channels))
        for channel in channels.values():
            channel.close()
    finally:
        launcher.stop_all()


def write_kept_data(channels: dict[str, grpc.Channel]) -> bytes:
    """Calls, rewards and a close, written before any fuzzing; returns the store's view of them."""
    store = store_grpc.TokenStoreServiceStub(channels["store"])
    assembler = assembler_grpc.AssemblerServiceStub(channels["assembler"])
    calls = []
    for session in KEPT_SESSIONS:
        for turn in range(2):
            call = make_call(
                f"{session}-call-{turn}",
                session,
                list(range(1, 40 + turn * 20)),
                [[7, 8, 9 + turn]],
            )
            call.choices[0].logprobs = tokens.pack_floats([-0.25, -math.inf, -3.5])
            calls.append(call)
    store.WriteCalls(store_pb.WriteCallsRequest(calls=calls))
    reward = reward_pb2.Reward(
        session_id=KEPT_SESSIONS[0], value=0.5, level=reward_pb2.REWARD_LEVEL_TRAJECTORY
    )
    assembler.ReportReward(assembler_pb.ReportRewardRequest(reward=reward))
    assembler.CloseSession(assembler_pb.CloseSessionRequest(session_id=KEPT_SESSIONS[1], group_id="kept-group",
                                                            group_size=1000, reward=1.0))  # fmt: skip
    return kept_view(store)


def kept_view(store: store_grpc.TokenStoreServiceStub) -> bytes:
    """The kept sessions' calls and rewards, token-exact, and each session's state."""
    response = store.BatchGetSessions(
        store_pb.BatchGetSessionsRequest(session_ids=KEPT_SESSIONS, view=store_pb.CALL_VIEW_FULL)
    )
    assert not response.missing_session_ids
    view = store_pb.BatchGetSessionsResponse()
    for contents in response.sessions:
        kept = view.sessions.add(calls=contents.calls, rewards=contents.rewards)
        session = contents.session
        kept.session.MergeFrom(type(session)(session_id=session.session_id, state=session.state,
                                             outcome=session.outcome, call_count=session.call_count))  # fmt: skip
    return view.SerializeToString(deterministic=True)


def methods_of(service: str) -> list[MethodDescriptor]:
    return list(descriptor_pool.Default().FindServiceByName(SERVICES[service]).methods)


def path_of(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def invoke(
    channel: grpc.Channel, method: MethodDescriptor, payloads: list[bytes]
) -> tuple[grpc.StatusCode, str]:
    """Send raw request bytes; the status the call ended with (OK for a stream that answered)."""
    path = path_of(method)
    try:
        # Bytes in, bytes out: no (de)serializers.
        if not method.server_streaming:
            if method.client_streaming:
                stream_unary: grpc.StreamUnaryMultiCallable[bytes, bytes] = channel.stream_unary(
                    path
                )
                stream_unary(iter(payloads), timeout=UNARY_TIMEOUT_S)
            else:
                unary_unary: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(path)
                unary_unary(payloads[0], timeout=UNARY_TIMEOUT_S)
            return grpc.StatusCode.OK, ""
        if method.client_streaming:
            stream_stream: grpc.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(
                path
            )
            responses = stream_stream(iter(payloads), timeout=STREAM_TIMEOUT_S)
        else:
            unary_stream: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(path)
            responses = unary_stream(payloads[0], timeout=STREAM_TIMEOUT_S)
        next(responses, None)
        responses.cancel()
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as error:
        return error.code(), error.details() or ""


def tame(method: MethodDescriptor, request: Message) -> Message:
    if method.name == "DeleteSessions":
        request.ClearField("updated_before")
    return request


def payloads(method: MethodDescriptor) -> st.SearchStrategy[list[bytes]]:
    message = messages(method.input_type).map(
        lambda request: tame(method, request).SerializeToString()
    )
    # Random bytes mostly fail to parse; those that parse carry unknown fields or odd values.
    one = st.one_of(message, message, message, st.binary(max_size=64))
    return (
        st.lists(one, min_size=1, max_size=3)
        if method.client_streaming
        else one.map(lambda payload: [payload])
    )


def plausible_calls() -> st.SearchStrategy[bytes]:
    """WriteCalls requests that pass every check but the ranges of their token ids and
    logprobs, so that those checks, not an earlier one, decide."""
    ids = st.lists(
        st.one_of(st.integers(0, 50_000), st.integers(-(2**31), -1)), min_size=1, max_size=6
    )
    bits = st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=6)
    # Writes are idempotent by call id, and Hypothesis replays examples: each gets an id of its own.
    numbers = itertools.count()

    def request(prompt: list[int], completion: list[int], logprob_bits: list[int]) -> bytes:
        call_number = next(numbers)
        call = make_call(
            f"plausible-{call_number}", f"plausible-session-{call_number}", prompt, [completion]
        )
        call.choices[0].logprobs = (
            np.resize(np.array(logprob_bits, np.uint32), len(completion)).view("<f4").tobytes()
        )
        return store_pb.WriteCallsRequest(calls=[call]).SerializeToString()

    return st.builds(request, ids, ids, bits)


def assert_up(stack: Stack, name: str) -> None:
    service = stack.services[name]
    assert service.process.poll() is None, (
        f"{name} exited with {service.process.returncode}:\n{service.log()[-4000:]}"
    )
    # types-grpcio-health-checking's HealthStub declares no methods.
    stub = health_pb2_grpc.HealthStub(stack.channels[name])
    health = stub.Check(health_pb2.HealthCheckRequest(), timeout=10)  # type: ignore[attr-defined]
    assert health.status == health_pb2.HealthCheckResponse.SERVING


FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES_PER_SERVICE, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)  # fmt: skip


def test_undecodable_bytes_are_invalid_argument_on_every_method_of_every_service(
    stack: Stack,
) -> None:
    for name in SERVICES:
        for method in methods_of(name):
            code, details = invoke(stack.channels[name], method, [UNDECODABLE])
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (
                f"{path_of(method)}: {code.name} {details}"
            )
            assert f"could not be decoded as {method.input_type.full_name}" in details
        assert_up(stack, name)


@pytest.mark.parametrize("name", SERVICES)
def test_fuzzed_requests_are_never_unknown_or_internal(stack: Stack, name: str) -> None:
    fuzzed = [method for method in methods_of(name) if method.name not in NOT_FUZZED]
    channel, process = stack.channels[name], stack.services[name].process

    @FUZZ_SETTINGS
    @given(
        st.sampled_from(fuzzed).flatmap(lambda method: st.tuples(st.just(method), payloads(method)))
    )
    def fuzz(case: tuple[MethodDescriptor, list[bytes]]) -> None:
        method, sent = case
        code, details = invoke(channel, method, sent)
        assert code not in FAILURES, f"{path_of(method)} answered {code.name}: {details}"
        assert process.poll() is None, (
            f"{name} exited on {path_of(method)}:\n{stack.services[name].log()[-4000:]}"
        )

    fuzz()
    assert_up(stack, name)


def test_out_of_range_tokens_and_logprobs_never_reach_the_store(stack: Stack) -> None:
    store = store_grpc.TokenStoreServiceStub(stack.channels["store"])
    write = next(m for m in methods_of("store") if m.name == "WriteCalls")
    accepted = itertools.count()

    @FUZZ_SETTINGS
    @given(plausible_calls())
    def fuzz(request: bytes) -> None:
        code, details = invoke(stack.channels["store"], write, [request])
        call = store_pb.WriteCallsRequest.FromString(request).calls[0]
        choice = call.choices[0]
        ids = np.concatenate(
            [
                tokens.unpack_token_ids(call.prompt_token_ids),
                tokens.unpack_token_ids(choice.token_ids),
            ]
        )
        in_range = bool(
            (ids >= 0).all() and (tokens.unpack_floats(choice.logprobs) < math.inf).all()
        )
        if not in_range:
            assert code == grpc.StatusCode.INVALID_ARGUMENT, f"{code.name}: {details}"
            assert (
                "token ids are never negative" in details
                or "a logprob is finite or -inf" in details
            )
            return
        assert code == grpc.StatusCode.OK, f"{code.name}: {details}"
        stored = store.GetCall(
            store_pb.GetCallRequest(call_id=call.call_id, view=store_pb.CALL_VIEW_FULL)
        ).call
        assert (stored.prompt_token_ids, stored.choices[0].logprobs) == (
            call.prompt_token_ids,
            choice.logprobs,
        )
        next(accepted)

    fuzz()
    assert next(accepted) > 0, "some generated calls are in range, and those are stored"


def test_everything_written_before_the_fuzzing_is_intact_and_every_service_is_up(
    stack: Stack,
) -> None:
    for name in SERVICES:
        assert_up(stack, name)
    assert kept_view(store_grpc.TokenStoreServiceStub(stack.channels["store"])) == stack.kept

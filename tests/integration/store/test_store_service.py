"""The store as deployed: `parity store serve` over gRPC, with the real grpcurl for the edges."""

from __future__ import annotations

import json
import queue

import grpc
import pytest

from parity.api.common.v1 import session_pb2
from parity.api.store.v1 import store_service_pb2 as pb
from parity.api.store.v1 import store_service_pb2_grpc as pb_grpc
from tests.call_factory import conversation, make_call
from tests.integration.test_grpcurl import grpcurl


@pytest.fixture
def store_stub(start_service, tmp_path):
    service = start_service(
        "store", "--url", f"sqlite:///{tmp_path}/store.db", "--max-message-mb", "4"
    )
    with grpc.insecure_channel(service.address) as channel:
        yield pb_grpc.TokenStoreServiceStub(channel), service


def status_of(call, *args) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(*args)
    return caught.value


def test_write_and_read_over_grpc(store_stub) -> None:
    stub, _ = store_stub
    calls = conversation("s", turns=4)
    response = stub.WriteCalls(pb.WriteCallsRequest(calls=calls))
    assert (response.written_count, response.duplicate_count) == (4, 0)
    assert stub.GetCall(pb.GetCallRequest(call_id=calls[3].call_id)).call == calls[3]
    listed = stub.ListCalls(pb.ListCallsRequest(session_id="s", view=pb.CALL_VIEW_FULL))
    assert list(listed.calls) == calls
    watched = next(stub.WatchCalls(pb.WatchCallsRequest(view=pb.CALL_VIEW_FULL)))
    assert list(watched.calls) == calls and watched.cursor
    stats = stub.GetStoreStats(pb.GetStoreStatsRequest())
    assert (stats.backend, stats.call_count) == ("sqlite", 4) and stats.bytes_per_token > 0


def test_a_write_stream_answers_each_batch_in_order_and_stops_at_a_refused_one(store_stub) -> None:
    stub, _ = store_stub
    first, second, after = (
        conversation("a", turns=2),
        conversation("b", turns=1),
        conversation("c", turns=1),
    )
    replies = stub.StreamWriteCalls(iter([
        pb.StreamWriteCallsRequest(calls=first),
        pb.StreamWriteCallsRequest(calls=[first[1], *second]),
    ]))  # fmt: skip
    assert [(r.written_count, r.duplicate_count) for r in replies] == [(2, 0), (1, 1)]
    assert (
        list(stub.ListCalls(pb.ListCallsRequest(session_id="a", view=pb.CALL_VIEW_FULL)).calls)
        == first
    )

    torn = make_call("torn", "t", [1, 2], [[3]])
    torn.prompt_token_ids = b"\x01\x02\x03"
    replies = stub.StreamWriteCalls(iter([
        pb.StreamWriteCallsRequest(calls=conversation("before", turns=1)),
        pb.StreamWriteCallsRequest(calls=[torn]),
        pb.StreamWriteCallsRequest(calls=after),
    ]))  # fmt: skip
    assert next(replies).written_count == 1
    error = status_of(next, replies)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "calls[0].prompt_token_ids" in (
        error.details() or ""
    )
    assert (
        status_of(stub.GetCall, pb.GetCallRequest(call_id=after[0].call_id)).code()
        == grpc.StatusCode.NOT_FOUND
    )
    assert stub.GetStoreStats(pb.GetStoreStatsRequest()).call_count == 4


def test_open_write_and_watch_streams_do_not_hold_shutdown(start_service, tmp_path) -> None:
    # Shutdown grace far longer than terminate() waits before SIGKILL: the store exits
    # cleanly only if it ends the streams waiting on their clients or on new commits.
    service = start_service(
        "store", "--url", f"sqlite:///{tmp_path}/store.db", "--shutdown-grace-s", "120"
    )
    batches: queue.Queue[pb.StreamWriteCallsRequest | None] = queue.Queue()
    batches.put(pb.StreamWriteCallsRequest(calls=conversation("s", turns=1)))
    with grpc.insecure_channel(service.address) as channel:
        stub = pb_grpc.TokenStoreServiceStub(channel)
        replies = stub.StreamWriteCalls(iter(batches.get, None))
        assert next(replies).written_count == 1
        watch = stub.WatchCalls(pb.WatchCallsRequest())
        assert len(next(watch).calls) == 1
        assert service.terminate(timeout=60) == 0
        assert list(replies) == [] and list(watch) == [], "the streams ended without an error"
        batches.put(None)


def test_bad_input_gets_invalid_argument_or_not_found_and_writes_nothing(store_stub) -> None:
    stub, _ = store_stub
    good = make_call("good", "s", [1, 2], [[3]])
    torn = make_call("torn", "s", [1, 2], [[3]])
    torn.prompt_token_ids = b"\x01\x02\x03"
    error = status_of(stub.WriteCalls, pb.WriteCallsRequest(calls=[good, torn]))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "calls[1].prompt_token_ids must be packed int32" in (error.details() or "")
    assert (
        status_of(stub.GetCall, pb.GetCallRequest(call_id="good")).code()
        == grpc.StatusCode.NOT_FOUND
    )

    too_many = [make_call(f"c{i}", "s", [1], [[2]]) for i in range(1001)]
    error = status_of(stub.WriteCalls, pb.WriteCallsRequest(calls=too_many))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "at most 1000 calls" in (
        error.details() or ""
    )

    oversized = make_call("big", "s", list(range(2_000_000)), [[1]])
    assert (
        status_of(stub.WriteCalls, pb.WriteCallsRequest(calls=[oversized])).code()
        == grpc.StatusCode.RESOURCE_EXHAUSTED
    )

    error = status_of(stub.GetSession, pb.GetSessionRequest(session_id="nope"))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.NOT_FOUND,
        "session 'nope' does not exist",
    )
    error = status_of(lambda r: next(stub.WatchCalls(r)), pb.WatchCallsRequest(cursor="bogus"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "cursor" in (error.details() or "")
    error = status_of(stub.ListSessions, pb.ListSessionsRequest(page_token="bogus"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in (
        error.details() or ""
    )
    error = status_of(stub.DeleteSessions, pb.DeleteSessionsRequest())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT

    # The service is still up and consistent after all of that.
    assert stub.WriteCalls(pb.WriteCallsRequest(calls=[good])).written_count == 1


def test_end_users_tags_deletion_and_reward_ids_over_grpc(store_stub) -> None:
    stub, _ = store_stub
    calls = [make_call(f"c-{n}", f"s-{n}", [1], [[2]]) for n in range(3)]
    for call, user, tags in zip(
        calls, ["user-1", "user-1", "user-2"], [["checkout", "prod"], [], ["prod"]], strict=True
    ):
        call.end_user_id = user
        call.tags[:] = tags
    stub.WriteCalls(pb.WriteCallsRequest(calls=calls))
    session = stub.GetSession(pb.GetSessionRequest(session_id="s-0")).session
    assert (session.end_user_id, list(session.tags)) == ("user-1", ["checkout", "prod"])
    by_user = stub.ListSessions(
        pb.ListSessionsRequest(end_user_id="user-1", order=pb.SESSION_ORDER_NEWEST_FIRST)
    )
    by_tag = stub.ListSessions(pb.ListSessionsRequest(tags=["prod"]))
    assert [s.session_id for s in by_user.sessions] == ["s-1", "s-0"]
    assert [(s.session_id, s.end_user_id) for s in by_tag.sessions] == [
        ("s-0", "user-1"),
        ("s-2", "user-2"),
    ]
    error = status_of(stub.ListSessions, pb.ListSessionsRequest(tags=["prod", "a,b"]))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and (error.details() or "").startswith(
        "tags[1]: tag 'a,b'"
    )
    unsorted = make_call("bad", "s-3", [1], [[2]])
    unsorted.tags[:] = ["prod", "checkout"]
    error = status_of(stub.WriteCalls, pb.WriteCallsRequest(calls=[unsorted]))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "calls[0].tags must be sorted" in (
        error.details() or ""
    )

    thumbs = {"reward_id": "r1", "session_id": "s-0", "value": 1.0, "level": 1, "name": "thumbs_up"}
    assert stub.WriteRewards(pb.WriteRewardsRequest(rewards=[thumbs])).written_count == 1
    assert stub.WriteRewards(pb.WriteRewardsRequest(rewards=[thumbs])).duplicate_count == 1
    error = status_of(stub.WriteRewards, pb.WriteRewardsRequest(rewards=[thumbs | {"value": 0.0}]))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "reward_id 'r1' is already stored with value 1.0" in (
        error.details() or ""
    ) and "refused value 0.0" in (error.details() or "")
    listed = stub.ListRewards(pb.ListRewardsRequest(session_id="s-0")).rewards
    assert [(r.value, r.name) for r in listed] == [(1.0, "thumbs_up")]

    deleted = stub.DeleteSessions(pb.DeleteSessionsRequest(end_user_id="user-1"))
    assert (
        deleted.deleted_session_count,
        deleted.deleted_call_count,
        deleted.deleted_reward_count,
    ) == (2, 2, 1)
    assert (
        stub.DeleteSessions(pb.DeleteSessionsRequest(end_user_id="user-1"))
        == pb.DeleteSessionsResponse()
    )
    assert (
        status_of(stub.GetSession, pb.GetSessionRequest(session_id="s-0")).code()
        == grpc.StatusCode.NOT_FOUND
    )
    assert [
        s.session_id for s in stub.ListSessions(pb.ListSessionsRequest(tags=["prod"])).sessions
    ] == ["s-2"]


def _stream_write(stub, request: pb.WriteCallsRequest):
    return list(stub.StreamWriteCalls(iter([pb.StreamWriteCallsRequest(calls=request.calls)])))


# Every RPC that writes, each given one good item and then one that names no session.
EMPTY_SESSION_WRITES = {
    "WriteCalls": (
        lambda stub: stub.WriteCalls,
        pb.WriteCallsRequest(
            calls=[make_call("named", "s", [1], [[2]]), make_call("orphan", "", [1], [[2]])]
        ),
        "calls[1].session_id is required",
    ),
    "StreamWriteCalls": (
        lambda stub: lambda request: _stream_write(stub, request),
        pb.WriteCallsRequest(
            calls=[make_call("named", "s", [1], [[2]]), make_call("orphan", "", [1], [[2]])]
        ),
        "calls[1].session_id is required",
    ),
    "WriteRewards": (
        lambda stub: stub.WriteRewards,
        pb.WriteRewardsRequest(
            rewards=[
                {"session_id": "s", "value": 1.0, "level": 1},
                {"session_id": "", "value": 1.0, "level": 1},
            ]
        ),
        "rewards[1].session_id is required",
    ),
    "CloseSession": (
        lambda stub: stub.CloseSession,
        pb.CloseSessionRequest(session_id=""),
        "session_id is required",
    ),
    "UpdateSessionMetadata": (
        lambda stub: stub.UpdateSessionMetadata,
        pb.UpdateSessionMetadataRequest(
            updates=[{"session_id": "s", "metadata": {"k": "v"}}, {"session_id": ""}]
        ),
        "updates[1].session_id is required",
    ),
    "DeleteSessions": (
        lambda stub: stub.DeleteSessions,
        pb.DeleteSessionsRequest(session_ids=["s", ""]),
        "session_ids[1] is required",
    ),
}


@pytest.mark.parametrize("rpc", EMPTY_SESSION_WRITES)
def test_every_write_refuses_an_empty_session_id_naming_the_field(store_stub, rpc: str) -> None:
    stub, _ = store_stub
    assert (
        stub.WriteCalls(
            pb.WriteCallsRequest(calls=[make_call("before", "s", [1], [[2]])])
        ).written_count
        == 1
    )
    method, request, message = EMPTY_SESSION_WRITES[rpc]
    error = status_of(method(stub), request)
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)
    # Nothing of the request was written, the good part included.
    stats = stub.GetStoreStats(pb.GetStoreStatsRequest())
    assert (stats.session_count, stats.call_count, stats.reward_count) == (1, 1, 0)
    session = stub.GetSession(pb.GetSessionRequest(session_id="s")).session
    assert (session.state, dict(session.metadata)) == (session_pb2.SESSION_STATE_OPEN, {})


def test_grpcurl_writes_and_reads_json(store_stub) -> None:
    _, service = store_stub
    body = json.dumps({"calls": [{"callId": "g1", "sessionId": "curl", "model": "tiny"}]})
    written = grpcurl(
        "-d", body, service.address, "parity.api.store.v1.TokenStoreService/WriteCalls"
    )
    assert written.returncode == 0, written.stderr
    assert json.loads(written.stdout) == {"written_count": 1}
    closed = grpcurl(
        "-d",
        '{"sessionId": "curl"}',
        service.address,
        "parity.api.store.v1.TokenStoreService/CloseSession",
    )
    assert json.loads(closed.stdout)["session"]["state"] == "SESSION_STATE_CLOSED"
    missing = grpcurl(
        "-d", '{"callId": "nope"}', service.address, "parity.api.store.v1.TokenStoreService/GetCall"
    )
    assert "Code: NotFound" in missing.stderr and "call 'nope' does not exist" in missing.stderr

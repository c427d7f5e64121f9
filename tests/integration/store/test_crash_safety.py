"""SIGKILL the store in the middle of sustained writes: nothing acknowledged is lost,
nothing is half-written, and the database reopens consistent."""

from __future__ import annotations

import signal
import threading
import time

import apsw
import grpc
import pytest

from parity.api.store.v1 import store_service_pb2 as pb
from parity.api.store.v1 import store_service_pb2_grpc as pb_grpc
from tests.call_factory import conversation

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
WRITERS = 8
# Kill only once this many batches are acknowledged: a fixed sleep let a slow CI machine
# reach the kill with a handful of batches written.
ACKED_BEFORE_KILL = 40
ACK_DEADLINE_S = 60.0


def _write_until_killed(
    address: str, writer: int, acked: list, attempted: list, stop: threading.Event
) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.TokenStoreServiceStub(channel)
        batch = 0
        while not stop.is_set():
            # Each batch is a whole 8-turn session: turns reference earlier turns of the same batch.
            calls = conversation(f"w{writer}-b{batch}", turns=8, prompt_len=100, completion_len=40)
            attempted.append(calls)
            try:
                stub.WriteCalls(pb.WriteCallsRequest(calls=calls), timeout=10)
            except grpc.RpcError:
                return
            acked.append(calls)
            batch += 1


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_sigkill_mid_write_keeps_every_acknowledged_batch(
    start_service, tmp_path, request, backend
) -> None:
    url = (
        f"sqlite:///{tmp_path}/store.db"
        if backend == "sqlite"
        else request.getfixturevalue("fresh_postgres_url")
    )
    victim = start_service("store", "--url", url)
    acked: list = []
    attempted: list = []
    stop = threading.Event()
    writers = [
        threading.Thread(
            target=_write_until_killed, args=(victim.address, w, acked, attempted, stop)
        )
        for w in range(WRITERS)
    ]
    for thread in writers:
        thread.start()
    deadline = time.monotonic() + ACK_DEADLINE_S
    while len(acked) < ACKED_BEFORE_KILL and time.monotonic() < deadline:
        time.sleep(0.05)
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait()
    stop.set()
    for thread in writers:
        thread.join(30)
    assert len(acked) >= ACKED_BEFORE_KILL, (
        "the store should have acknowledged plenty of batches before the kill"
    )
    assert len(attempted) > len(acked), "the kill should land while writes are in flight"

    if backend == "sqlite":
        checked = (
            apsw.Connection(f"{tmp_path}/store.db").execute("PRAGMA integrity_check").fetchall()
        )
        assert checked == [("ok",)]

    survivor = start_service("store", "--url", url)
    with grpc.insecure_channel(survivor.address) as channel:
        stub = pb_grpc.TokenStoreServiceStub(channel)
        for calls in acked:
            session = calls[0].session_id
            stored = stub.ListCalls(
                pb.ListCallsRequest(session_id=session, view=pb.CALL_VIEW_FULL)
            ).calls
            assert list(stored) == calls, f"acknowledged batch {session} lost or altered"
        acked_sessions = {calls[0].session_id for calls in acked}
        for calls in attempted:
            if calls[0].session_id in acked_sessions:
                continue
            try:
                stored = stub.ListCalls(
                    pb.ListCallsRequest(session_id=calls[0].session_id, view=pb.CALL_VIEW_FULL)
                ).calls
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.NOT_FOUND
                continue
            assert list(stored) == calls, (
                "an unacknowledged batch may be absent or whole, never partial"
            )
        # Every stored call decodes: the whole commit log streams back intact.
        total = stub.GetStoreStats(pb.GetStoreStatsRequest()).call_count
        streamed = 0
        for response in stub.WatchCalls(
            pb.WatchCallsRequest(view=pb.CALL_VIEW_FULL, max_batch_size=1000)
        ):
            streamed += len(response.calls)
            if streamed >= total:
                break
        assert streamed == total
        # And the store keeps accepting writes.
        assert (
            stub.WriteCalls(
                pb.WriteCallsRequest(calls=conversation("after", turns=2))
            ).written_count
            == 2
        )

"""The capture sink against a real store process: refused calls, and a spool that cannot be written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.store.v1 import store_service_pb2_grpc as store_grpc
from parity.services.ingest.capture.capture_sink import CaptureSink
from parity.services.ingest.capture.spool import Spool
from parity.services.ingest.openai_errors import HttpError
from tests.call_factory import make_call
from tests.conftest import free_port

pytestmark = pytest.mark.timeout(120)


def stored_call_ids(address: str, session_id: str) -> list[str]:
    with grpc.insecure_channel(address) as channel:
        listed = store_grpc.TokenStoreServiceStub(channel).ListCalls(
            store_pb.ListCallsRequest(session_id=session_id)
        )
    return [call.call_id for call in listed.calls]


def test_a_call_the_store_refuses_is_set_aside_and_the_rest_are_stored(
    module_services, tmp_path: Path
) -> None:
    store = module_services.start("store", "--url", "memory://")
    good = [make_call(f"good-{i}", "refusals", [1, 2, 3], [[4, 5]]) for i in range(5)]
    bad = make_call("bad", "refusals", [1, 2, 3], [[4, 5]])
    bad.prompt_token_ids = b"\x01\x02\x03"  # not packed int32: the store refuses it
    spool = Spool(tmp_path / "spool.db", 1 << 30)

    async def run() -> None:
        sink = CaptureSink(store.address, spool)
        await sink.start()
        # Submitted together, so they travel in one batch that the store refuses whole.
        await asyncio.gather(*(sink.submit(call) for call in [*good[:2], bad, *good[2:]]))
        await sink.stop()

    asyncio.run(run())
    assert stored_call_ids(store.address, "refusals") == [call.call_id for call in good]
    reopened = Spool(tmp_path / "spool.db", 1 << 30)
    assert reopened.count == 0 and reopened.refused_count == 1
    [(reason,)] = reopened._db.execute("SELECT reason FROM refused").fetchall()
    assert (
        isinstance(reason, str)
        and reason.startswith("INVALID_ARGUMENT")
        and "packed int32" in reason
    )
    reopened.close()


def test_a_spool_that_cannot_be_written_refuses_agents_until_it_can(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db", 1 << 30)
    pages = spool._db.execute("PRAGMA page_count").fetchall()[0][0]
    # SQLite's own disk-full error, as a full filesystem would give, once a call needs a new page.
    spool._db.execute(f"PRAGMA max_page_count={pages}")
    unreachable = f"127.0.0.1:{free_port()}"

    async def run() -> None:
        sink = CaptureSink(unreachable, spool, store_timeout_s=0.5, retry_interval_s=0.1)
        await sink.start()
        with pytest.raises(HttpError) as refused:
            await sink.submit(make_call("kept", "full-disk", list(range(50_000)), [[4, 5]]))
        assert refused.value.status == 503 and "could not be made durable" in refused.value.message
        with pytest.raises(HttpError, match="cannot be written"):
            sink.check_accepting()
        spool._db.execute("PRAGMA max_page_count=1073741823")
        # The call the agent was refused for is still queued, and lands once the disk takes it.
        # The spool counts the call from its worker thread a moment before the sink hears the
        # write succeeded, so wait for the sink to accept again rather than for the count.
        for _ in range(100):
            try:
                sink.check_accepting()
                break
            except HttpError:
                await asyncio.sleep(0.05)
        sink.check_accepting()
        assert spool.count == 1 and sink.queue_depth == 0
        await sink.stop()

    asyncio.run(run())

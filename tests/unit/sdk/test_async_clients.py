"""The asyncio clients: retries by count or by time budget, one RPCError; the store's serialized-call
framing equals protobuf's own encoding."""

from __future__ import annotations

import time

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity.api.common.v1 import llm_call_pb2
from parity.api.ingest.v1 import ingest_service_pb2 as ingest_pb
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import AsyncIngestClient, AsyncStoreClient, RPCError
from parity.clients.store_writes import encode_write_calls
from tests.conftest import free_port

calls = st.lists(
    st.builds(llm_call_pb2.LlmCall, call_id=st.text(max_size=40), session_id=st.text(max_size=40),
              prompt_token_ids=st.binary(max_size=300), request_json=st.binary(max_size=300)),
    max_size=8,
)  # fmt: skip


@given(calls)
def test_framed_serialized_calls_are_the_request_protobuf_would_build(batch: list[llm_call_pb2.LlmCall]) -> None:
    framed = encode_write_calls([call.SerializeToString() for call in batch])
    assert framed == store_pb.StreamWriteCallsRequest(calls=batch).SerializeToString()
    assert store_pb.WriteCallsRequest.FromString(framed).calls == batch


async def test_an_unreachable_service_is_retried_for_the_time_budget_then_named_in_one_error() -> None:
    client = AsyncStoreClient(f"127.0.0.1:{free_port()}", timeout_s=1.0, retry_for_s=0.6, backoff_s=0.05)
    started = time.monotonic()
    with pytest.raises(RPCError) as raised:
        await client.get_session(store_pb.GetSessionRequest(session_id="s"))
    await client.close()
    assert raised.value.code == grpc.StatusCode.UNAVAILABLE and raised.value.method == "GetSession"
    assert 0.6 <= time.monotonic() - started < 5


async def test_no_retries_means_one_attempt() -> None:
    client = AsyncIngestClient(f"127.0.0.1:{free_port()}", timeout_s=1.0, retries=0, backoff_s=5.0)
    started = time.monotonic()
    with pytest.raises(RPCError, match="UNAVAILABLE"):
        await client.get_stats(ingest_pb.GetStatsRequest())
    await client.close()
    assert time.monotonic() - started < 2.5, "a backoff of up to 5 s would mean a retry"

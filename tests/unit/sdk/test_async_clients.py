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
def test_framed_serialized_calls_are_the_request_protobuf_would_build(
    batch: list[llm_call_pb2.LlmCall],
) -> None:
    framed = encode_write_calls([call.SerializeToString() for call in batch])
    assert framed == store_pb.StreamWriteCallsRequest(calls=batch).SerializeToString()
    assert store_pb.WriteCallsRequest.FromString(framed).calls == batch


def counting_attempts(client, method: str) -> list[tuple[float, float]]:
    """Each attempt of `method` the client makes, as (began, ended) on the monotonic clock: the retry loop's own
    record, where the time it took would only hint at it."""
    attempts: list[tuple[float, float]] = []
    call = getattr(client.stub, method)

    async def attempt(*args, **kwargs):
        began = time.monotonic()
        try:
            return await call(*args, **kwargs)
        finally:
            attempts.append((began, time.monotonic()))

    setattr(client.stub, method, attempt)
    return attempts


async def test_an_unreachable_service_is_retried_for_the_time_budget_then_named_in_one_error() -> (
    None
):
    budget_s = 0.6
    client = AsyncStoreClient(
        f"127.0.0.1:{free_port()}", timeout_s=1.0, retry_for_s=budget_s, backoff_s=0.05
    )
    attempts = counting_attempts(client, "GetSession")
    started = time.monotonic()
    with pytest.raises(RPCError) as raised:
        await client.get_session(store_pb.GetSessionRequest(session_id="s"))
    gave_up = time.monotonic()
    await client.close()
    assert raised.value.code == grpc.StatusCode.UNAVAILABLE and raised.value.method == "GetSession"
    # Tried until the budget was spent, and not once after: every attempt but the last ended with budget left
    # (the budget runs from before the first attempt began).
    assert gave_up - started >= budget_s
    assert all(ended < attempts[0][0] + budget_s for _, ended in attempts[:-1]), attempts


async def test_no_retries_means_one_attempt() -> None:
    client = AsyncIngestClient(f"127.0.0.1:{free_port()}", timeout_s=1.0, retries=0, backoff_s=0.05)
    attempts = counting_attempts(client, "GetStats")
    with pytest.raises(RPCError, match="UNAVAILABLE"):
        await client.get_stats(ingest_pb.GetStatsRequest())
    await client.close()
    assert len(attempts) == 1

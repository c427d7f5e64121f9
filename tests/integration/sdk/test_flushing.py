"""`parity.flush()`, and the reward that waits on it, against a real ingest, store,
assembler and vLLM, with ingest's link to the store cut and restored."""

from __future__ import annotations

import concurrent.futures
import contextvars
import time

import pytest

import parity
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import StoreClient
from tests.integration.stack_fixtures import start_ingest
from tests.integration.tcp_relay import TcpRelay

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


def test_a_reward_right_after_an_answer_waits_until_ingest_has_stored_its_call(
    module_services, vllm_server, tmp_path
) -> None:
    store = module_services.start("store", "--url", f"sqlite:///{tmp_path}/store.db")
    assembler = module_services.start("assembler", "--store-address", store.address)
    previous = parity.current_config()
    with TcpRelay(int(store.address.rsplit(":", 1)[1])) as relay:
        # "after" answers before the call is stored, the widest window for a reward to overtake it.
        _, http_port = start_ingest(module_services, f"127.0.0.1:{relay.port}", vllm_server.base_url,
                                    tmp_path / "spool.db", "--durability", "after", "--store-timeout-s", "1")  # fmt: skip
        parity.configure(ingest_url=f"http://127.0.0.1:{http_port}", assembler_address=assembler.address,
                         store_address=store.address)  # fmt: skip
        try:
            relay.cut()
            with (
                parity.session("reward-after-answer"),
                concurrent.futures.ThreadPoolExecutor(1) as pool,
            ):
                parity.get_chat_client().chat.completions.create(
                    model=vllm_server.model_name,
                    messages=[{"role": "user", "content": "hi"}],
                    max_tokens=2,
                )
                with pytest.raises(parity.FlushError, match="not all stored after 0.5 s"):
                    parity.flush(timeout_s=0.5)
                # Straight to the store, this reward would be refused: its session is not there yet.
                rewarding = pool.submit(contextvars.copy_context().run, parity.reward, 1.0, 0)
                time.sleep(1.5)
                assert not rewarding.done(), "the reward waits while ingest cannot store the call"
                relay.restore()
                reward_id = rewarding.result(timeout=60)
            assert parity.flush() >= 1
        finally:
            parity.configure(
                **{
                    k: getattr(previous, k)
                    for k in ("ingest_url", "assembler_address", "store_address")
                }
            )
    client = StoreClient(store.address)
    [call] = client.list_calls(
        store_pb.ListCallsRequest(session_id="reward-after-answer", view=store_pb.CALL_VIEW_FULL)
    ).calls
    [reward] = client.list_rewards(
        store_pb.ListRewardsRequest(session_id="reward-after-answer")
    ).rewards
    assert (reward.reward_id, reward.value, reward.step_index) == (
        reward_id,
        1.0,
        0,
    ) and call.choices[0].token_ids

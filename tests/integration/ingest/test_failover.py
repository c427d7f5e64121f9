"""Two replicas of the real vLLM: sessions stick to one, fail over while it is down, and come back.

The second replica is the same vLLM reached through a TCP relay that the test can cut and
restore, so a replica dies and returns without starting a second vLLM on a 2-core machine.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import httpx
import orjson
import pytest

from parity.api.common.v1 import llm_call_pb2
from parity.api.ingest.v1 import ingest_service_pb2 as pb
from parity.api.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from parity.api.ingest.v1 import replica_pb2
from parity.services.ingest.capture.capture_sink import CaptureSink
from parity.services.ingest.capture.recorder import CHAT
from parity.services.ingest.capture.spool import Spool
from parity.services.ingest.chat_backend import ChatBackend, PolicyState
from parity.services.ingest.endpoints.openai_chat.serving import OpenAIChatServing
from parity.services.ingest.endpoints.session_headers import SessionHeaders
from parity.services.ingest.model_aliases import ModelAliases
from parity.services.ingest.replies import StreamReply
from parity.services.ingest.upstream.client import UpstreamClient
from parity.services.ingest.upstream.external_models import ExternalModels
from parity.services.ingest.upstream.replica_router import ReplicaRouter
from tests.integration.stack_fixtures import IngestStack, start_ingest
from tests.integration.tcp_relay import TcpRelay
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


def replicas(ingest_address: str) -> dict[str, int]:
    with grpc.insecure_channel(ingest_address) as channel:
        listed = pb_grpc.IngestServiceStub(channel).ListReplicas(pb.ListReplicasRequest())
    return {replica.name: replica.health for replica in listed.replicas}


def wait_for_health(ingest_address: str, expected: dict[str, int], timeout: float = 30) -> None:
    eventually(lambda: replicas(ingest_address) == expected, timeout_s=timeout, interval_s=0.2,
               what=lambda: f"replicas {replicas(ingest_address)} becoming {expected}")  # fmt: skip


def home_replicas(urls: list[str], model: str, sessions: list[str]) -> dict[str, str]:
    """The replica rendezvous hashing gives each session while every replica is healthy."""
    router = ReplicaRouter(urls)
    for replica in router.replicas:
        replica.models, replica.healthy = {model}, True
    return {session: router.candidates(model, session)[0].name for session in sessions}


def serve_turn(stack: IngestStack, model: str, sessions: list[str]) -> dict[str, str]:
    """One call per session; returns the replica each session's new call was captured from."""
    for session in sessions:
        reply = httpx.post(f"{stack.base_url}/chat/completions", headers={"X-Parity-Session": session}, timeout=60,
                           json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})  # fmt: skip
        assert reply.status_code == 200, reply.text
    return {session: stack.calls(session)[-1].replica for session in sessions}


def test_sessions_stick_to_their_replica_and_fail_over_while_it_is_down(
    module_services, vllm_server, relay: TcpRelay, tmp_path
) -> None:
    direct, relayed = vllm_server.base_url, f"http://127.0.0.1:{relay.port}"
    store = module_services.start("store", "--url", "memory://")
    ingest, http_port = start_ingest(
        module_services, store.address, f"{direct},{relayed}", tmp_path / "spool.db"
    )
    stack = IngestStack(store, ingest, http_port, tmp_path / "spool.db")
    healthy, unhealthy = replica_pb2.REPLICA_HEALTH_HEALTHY, replica_pb2.REPLICA_HEALTH_UNHEALTHY
    direct_name, relayed_name = (url.split("://", 1)[1] for url in (direct, relayed))
    wait_for_health(ingest.address, {direct_name: healthy, relayed_name: healthy})

    sessions = [f"failover-{i}" for i in range(16)]
    home = home_replicas([direct, relayed], vllm_server.model_name, sessions)
    assert set(home.values()) == {direct_name, relayed_name}, (
        "16 sessions should land on both replicas"
    )
    assert serve_turn(stack, vllm_server.model_name, sessions) == home
    assert serve_turn(stack, vllm_server.model_name, sessions) == home, (
        "a session sticks to its replica"
    )

    relay.cut()
    # Every call still succeeds: the relayed replica's sessions move, the others stay put.
    assert serve_turn(stack, vllm_server.model_name, sessions) == dict.fromkeys(
        sessions, direct_name
    )
    assert replicas(ingest.address)[relayed_name] == unhealthy

    relay.restore()
    wait_for_health(ingest.address, {direct_name: healthy, relayed_name: healthy})
    assert serve_turn(stack, vllm_server.model_name, sessions) == home, (
        "sessions go back once it is healthy"
    )


def test_a_replica_dying_mid_answer_gets_a_502_and_the_partial_call_is_recorded(
    module_services, vllm_server, relay: TcpRelay, tmp_path
) -> None:
    # Connections die after 50 kB of answer: far into a stream of 1,500 tokens with their
    # ids and logprobs, however fast vLLM makes them; health answers are much smaller.
    relay.truncate_after = 50_000
    store = module_services.start("store", "--url", "memory://")
    ingest, http_port = start_ingest(module_services, store.address, f"http://127.0.0.1:{relay.port}",
                                     tmp_path / "spool.db", "--upstream-retries", "1")  # fmt: skip
    stack = IngestStack(store, ingest, http_port, tmp_path / "spool.db")
    wait_for_health(ingest.address, {f"127.0.0.1:{relay.port}": replica_pb2.REPLICA_HEALTH_HEALTHY})
    body = {"model": vllm_server.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1500,
            "ignore_eos": True, "stream": True}  # fmt: skip

    with httpx.stream("POST", f"{stack.base_url}/chat/completions", json=body, timeout=60,
                      headers={"X-Parity-Session": "cut-stream"}) as reply:  # fmt: skip
        assert reply.status_code == 200
        lines = list(reply.iter_lines())
    events = [
        json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {")
    ]
    assert [line for line in lines if line][-1] == "data: [DONE]", "the stream still ends properly"
    assert "upstream" in events[-1]["error"]["message"], events[-1]
    [call] = stack.calls("cut-stream")
    assert (
        call.outcome == llm_call_pb2.CALL_OUTCOME_UPSTREAM_ERROR and "stream" in call.error_message
    )
    # The tokens the agent was sent, at least, and fewer than a whole answer. Besides the
    # closing error, the first event (the role) is the only one without a token.
    token_events = len(events) - 2
    assert 4 <= token_events <= len(call.choices[0].token_ids) // 4 < body["max_tokens"]

    # Connections that die before an answer's headers are through: retried, then a clear
    # 502, and the call is recorded all the same.
    relay.truncate_after = 100
    relay.cut()
    relay.restore()
    lost = httpx.post(f"{stack.base_url}/chat/completions", json=body | {"stream": False}, timeout=60,
                      headers={"X-Parity-Session": "cut-answer"})  # fmt: skip
    assert (
        lost.status_code == 502
        and "upstream failed after 2 attempts" in lost.json()["error"]["message"]
    )
    [call] = stack.calls("cut-answer")
    assert (
        call.outcome == llm_call_pb2.CALL_OUTCOME_UPSTREAM_ERROR
        and call.timings.upstream_attempts == 2
    )
    assert call.error_message == lost.json()["error"]["message"] and not call.choices


def test_a_replica_that_never_accepts_is_failed_over_after_the_connect_timeout(
    module_services, vllm_server, relay: TcpRelay, tmp_path
) -> None:
    direct, relayed = vllm_server.base_url, f"http://127.0.0.1:{relay.port}"
    store = module_services.start("store", "--url", "memory://")
    # Health checks far apart, so the request itself meets the frozen replica.
    ingest, http_port = start_ingest(module_services, store.address, f"{direct},{relayed}", tmp_path / "spool.db",
                                     "--health-interval-s", "60")  # fmt: skip
    stack = IngestStack(store, ingest, http_port, tmp_path / "spool.db")
    direct_name, relayed_name = (url.split("://", 1)[1] for url in (direct, relayed))
    healthy = replica_pb2.REPLICA_HEALTH_HEALTHY
    wait_for_health(ingest.address, {direct_name: healthy, relayed_name: healthy})
    home = home_replicas(
        [direct, relayed], vllm_server.model_name, [f"frozen-{i}" for i in range(64)]
    )
    session = next(s for s, name in home.items() if name == relayed_name)

    relay.freeze()
    assert serve_turn(stack, vllm_server.model_name, [session]) == {session: direct_name}
    assert replicas(ingest.address)[relayed_name] == replica_pb2.REPLICA_HEALTH_UNHEALTHY
    assert "connect timed out" in ingest.log()


def relayed_stack(
    module_services, relay: TcpRelay, tmp_path, upstream_timeout_s: float
) -> IngestStack:
    """A store and an ingest whose one replica is the relay, healthy, checked once a minute."""
    store = module_services.start("store", "--url", "memory://")
    ingest, http_port = start_ingest(module_services, store.address, f"http://127.0.0.1:{relay.port}",
                                     tmp_path / "spool.db", "--health-interval-s", "60",
                                     "--upstream-timeout-s", str(upstream_timeout_s))  # fmt: skip
    wait_for_health(ingest.address, {f"127.0.0.1:{relay.port}": replica_pb2.REPLICA_HEALTH_HEALTHY})
    return IngestStack(store, ingest, http_port, tmp_path / "spool.db")


def test_an_answer_broken_off_or_stalled_midway_is_a_502_or_504_and_recorded(
    module_services, vllm_server, relay: TcpRelay, tmp_path
) -> None:
    stack = relayed_stack(module_services, relay, tmp_path, upstream_timeout_s=5)
    body = {"model": vllm_server.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200,
            "ignore_eos": True}  # fmt: skip
    assert (
        httpx.post(f"{stack.base_url}/chat/completions", json=body, timeout=60).status_code == 200
    )
    # Past the headers, well before the end of an answer that carries token ids and logprobs;
    # for new connections, so the warm-up's kept-alive one goes.
    relay.truncate_after = 2000
    relay.cut()
    relay.restore()
    for stall, status, reason in (
        (False, 502, "unreadable answer"),
        (True, 504, "stalled while answering"),
    ):
        relay.stall = stall
        reply = httpx.post(f"{stack.base_url}/chat/completions", json=body, timeout=60,
                           headers={"X-Parity-Session": f"broken-{status}"})  # fmt: skip
        assert reply.status_code == status and reason in reply.json()["error"]["message"], (
            reply.text
        )
        [call] = stack.calls(f"broken-{status}")
        assert (
            call.outcome == llm_call_pb2.CALL_OUTCOME_UPSTREAM_ERROR
            and reason in call.error_message
        )


def test_an_agent_that_leaves_a_stalled_stream_stops_it_at_once(
    module_services, vllm_server, relay: TcpRelay, tmp_path
) -> None:
    # The answer stops passing after its first events, as when vLLM's server falls behind
    # and holds its outputs back: the agent leaving must end the stream then, not at the
    # next output or at the upstream timeout.
    stack = relayed_stack(module_services, relay, tmp_path, upstream_timeout_s=300)
    relay.truncate_after, relay.stall = 3000, True
    body = {"model": vllm_server.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000,
            "ignore_eos": True, "stream": True}  # fmt: skip
    with httpx.stream(
        "POST", f"{stack.session_url('left')}/chat/completions", json=body, timeout=60
    ) as reply:
        # Held, so the connection stays open until the agent leaves: a dropped line
        # iterator closes it as soon as the generator is collected.
        # The role's event and two tokens': what passed before the stall has reached ingest, which now waits on a
        # silent upstream.
        events = (line for line in reply.iter_lines() if line.startswith("data: "))
        assert [next(events) for _ in range(3)]
    [call] = stack.wait_for_calls("left", 1, timeout=60)
    assert call.outcome == llm_call_pb2.CALL_OUTCOME_CLIENT_DISCONNECTED, call.error_message
    assert 0 < len(call.choices[0].token_ids) // 4 < 1000
    with grpc.insecure_channel(stack.ingest.address) as channel:
        [replica] = (
            pb_grpc.IngestServiceStub(channel).ListReplicas(pb.ListReplicasRequest()).replicas
        )
    assert replica.in_flight == 0


def test_a_stream_closed_at_its_last_events_is_still_recorded(
    module_services, vllm_server, relay: TcpRelay, tmp_path
) -> None:
    # The whole answer, [DONE] included, reaches ingest in one read, and the agent leaves
    # before [DONE] reaches it: the relay is closed at the yield of the last events.
    store = module_services.start("store", "--url", "memory://")
    body = {"model": vllm_server.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
            "ignore_eos": True, "stream": True}  # fmt: skip

    async def leave_before_done() -> None:
        router = ReplicaRouter([f"http://127.0.0.1:{relay.port}"], health_interval_s=60)
        await router.start()
        # After the health check, which is no stream and would wait for a [DONE] forever.
        relay.hold_answers = True
        upstream = UpstreamClient(router)
        sink = CaptureSink(store.address, Spool(tmp_path / "spool.db", 1 << 30))
        await sink.start()
        try:
            backend = ChatBackend(router, upstream, sink, PolicyState(), ExternalModels())
            serving = OpenAIChatServing(
                backend, ModelAliases([], backend.served, router.policy_model)
            )
            reply = await serving.handle(CHAT, orjson.dumps(body), "closed-late", SessionHeaders())
            assert isinstance(reply, StreamReply)
            assert b'"finish_reason":"length"' in await anext(reply.events), (
                "the answer came in one piece"
            )
            await reply.events.aclose()
        finally:
            await sink.stop()
            await upstream.stop()
            await router.stop()

    asyncio.run(leave_before_done())
    stack = IngestStack(store, store, 0, tmp_path / "spool.db")
    [call] = stack.wait_for_calls("closed-late", 1)
    assert (
        call.outcome == llm_call_pb2.CALL_OUTCOME_SUCCEEDED
        and len(call.choices[0].token_ids) == 8 * 4
    )

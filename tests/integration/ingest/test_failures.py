"""Ingest under bad input, missing credentials, paused traffic, a store outage and a dying upstream."""

from __future__ import annotations

import base64
import json
import threading
import time

import grpc
import httpx
import pytest

from parity.api.common.v1 import llm_call_pb2
from parity.api.ingest.v1 import ingest_service_pb2 as pb
from parity.api.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from parity.services.inference.vllm_launcher import VllmLaunchConfig, VllmServer
from parity.services.ingest.capture.spool import Spool
from tests.conftest import free_port
from tests.integration.stack_fixtures import IngestStack, start_ingest
from tests.integration.vllm_engine import engine_frozen, generated_tokens
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


def chat(model: str, **extra) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
    } | extra


def post(base_url: str, body, **kwargs) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{base_url}/chat/completions", content=content, timeout=60,
                      headers={"Content-Type": "application/json"} | kwargs.pop("headers", {}), **kwargs)  # fmt: skip


def assert_openai_error(response: httpx.Response, status: int, fragment: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert fragment in error["message"] and error["type"]


def test_bad_input_gets_openai_style_4xx(ingest_stack, vllm_server) -> None:
    base, model = ingest_stack.base_url, vllm_server.model_name
    assert_openai_error(post(base, b"{not json"), 400, "not valid JSON")
    assert_openai_error(post(base, b"[1, 2]"), 400, "must be a JSON object")
    assert_openai_error(post(base, {"messages": []}), 400, "model is required")
    assert_openai_error(post(base, {"model": model}), 400, "messages is required")
    assert_openai_error(post(base, chat("gpt-nope")), 404, "`gpt-nope` does not exist")
    assert_openai_error(post(base, chat(model, metadata={"k": 1})), 400, "metadata")
    assert_openai_error(post(base, chat(model, metadata={"k": "a\x00b"})), 400, "NUL")
    too_long = "p1." + base64.urlsafe_b64encode(
        json.dumps({"s": "x" * 300}).encode()
    ).decode().rstrip("=")
    assert_openai_error(post(ingest_stack.session_url(too_long), chat(model)), 400, "at most 256")
    assert_openai_error(
        post(ingest_stack.session_url("bad slug"), chat(model)), 400, "invalid session in URL"
    )
    assert_openai_error(
        post(base, chat(model), headers={"X-Parity-Session": "p1.!!"}), 400, "X-Parity-Session"
    )
    assert_openai_error(
        post(base, chat(model), headers={"X-Parity-Session": b"\xff\xfe"}), 400, "X-Parity-Session"
    )
    assert_openai_error(
        post(base, chat(model, max_tokens=-1)), 400, "max_tokens"
    )  # vLLM's own 400, passed on
    assert_openai_error(httpx.get(f"{base}/chat/completions"), 405, "accepts POST only")
    assert_openai_error(httpx.get(f"{base}/nothing-here"), 404, "no route")
    huge = json.dumps(chat(model, padding="x" * (33 << 20))).encode()
    assert_openai_error(post(base, huge), 413, "at most")
    flush = f"http://127.0.0.1:{ingest_stack.http_port}/parity/v1/flush"
    assert_openai_error(httpx.post(flush, content=b"{"), 400, "not valid JSON")
    assert_openai_error(httpx.post(flush, json={"timeout_s": 0}), 400, "timeout_s must be")
    assert_openai_error(httpx.post(flush, json={"timeout_s": "5"}), 400, "timeout_s must be")
    assert_openai_error(httpx.post(flush, json={"timeout": 5}), 400, 'at most "timeout_s"')
    assert_openai_error(httpx.get(flush), 405, "accepts POST only")
    assert post(base, chat(model)).status_code == 200, "the process stays up after all of that"


def test_metrics_and_health(ingest_stack, vllm_server) -> None:
    assert httpx.get(f"http://127.0.0.1:{ingest_stack.http_port}/health").status_code == 200
    assert post(ingest_stack.base_url, chat(vllm_server.model_name)).status_code == 200
    for n in range(3):
        httpx.get(f"http://127.0.0.1:{ingest_stack.http_port}/probe-{n}")
    metrics = httpx.get(f"http://127.0.0.1:{ingest_stack.http_port}/metrics").text
    assert 'parity_ingest_requests_total{endpoint="/v1/chat/completions",status="200"}' in metrics
    assert (
        "parity_ingest_request_seconds_bucket" in metrics and "parity_ingest_spool_calls" in metrics
    )
    assert (
        "parity_ingest_capture_queue_depth" in metrics and "parity_ingest_refused_calls" in metrics
    )
    # Paths nobody serves share one label: a client cannot grow the label set.
    assert 'endpoint="other",status="404"' in metrics and "probe-" not in metrics
    [model] = httpx.get(f"{ingest_stack.base_url}/models").json()["data"]
    assert (
        model["id"] == vllm_server.model_name
        and model["object"] == "model"
        and model["created"] > 0
    )


def test_an_agent_that_goes_away_mid_stream_stops_the_generation(ingest_stack, vllm_server) -> None:
    body = chat(vllm_server.model_name, max_tokens=1500, stream=True, ignore_eos=True)
    generated_before = generated_tokens(vllm_server)

    def forwarded() -> int:
        with grpc.insecure_channel(ingest_stack.ingest.address) as channel:
            [replica] = (
                pb_grpc.IngestServiceStub(channel).ListReplicas(pb.ListReplicasRequest()).replicas
            )
        return replica.in_flight

    # Frozen, vLLM cannot finish the answer before the agent leaves, however busy the cores.
    with engine_frozen(vllm_server):
        with httpx.stream("POST", f"{ingest_stack.session_url('gone-agent')}/chat/completions", json=body,
                          timeout=60) as reply:  # fmt: skip
            assert reply.status_code == 200
            eventually(lambda: forwarded() == 1, what="the request forwarded to vLLM")
        # Recorded while vLLM is still frozen: ingest did not wait for an answer nobody reads.
        [call] = ingest_stack.wait_for_calls("gone-agent", 1, timeout=60)
    assert call.outcome == llm_call_pb2.CALL_OUTCOME_CLIENT_DISCONNECTED
    assert not call.choices or not call.choices[0].token_ids
    assert forwarded() == 0
    # Had ingest kept its upstream request, it would now generate beside this one, a token a step: vLLM generates
    # this one's two tokens alone.
    post(
        ingest_stack.session_url("after-gone-agent"),
        chat(vllm_server.model_name, max_tokens=2, ignore_eos=True),
    )
    generated = eventually(lambda: generated_tokens(vllm_server) - generated_before,
                           what="vLLM counting the tokens it generated")  # fmt: skip
    assert generated == 2


def test_control_and_the_http_api_need_tokens_of_their_role(
    module_services, vllm_server, tmp_path
) -> None:
    tokens = {role: f"{role}-token-0123456789abcdef" for role in ("read", "agent", "admin")}
    table = tmp_path / "tokens"
    table.write_text("".join(f"{role} {token}\n" for role, token in tokens.items()))
    store = module_services.start("store", "--url", "memory://", "--auth-tokens-file", str(table))
    with pytest.MonkeyPatch.context() as env:
        # Ingest writes to the store with its own token, as every client does.
        env.setenv("PARITY_TOKEN", tokens["admin"])
        ingest, http_port = start_ingest(module_services, store.address, vllm_server.base_url, tmp_path / "spool.db",
                                         "--auth-tokens-file", str(table))  # fmt: skip
    with grpc.insecure_channel(ingest.address) as channel:
        control = pb_grpc.IngestServiceStub(channel)
        with pytest.raises(grpc.RpcError) as denied:
            control.SetPolicyVersion(pb.SetPolicyVersionRequest(policy_version=1))
        assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as lower:
            control.PauseTraffic(
                pb.PauseTrafficRequest(), metadata=(("authorization", f"Bearer {tokens['read']}"),)
            )
        assert lower.value.code() == grpc.StatusCode.PERMISSION_DENIED
        stats = control.GetStats(
            pb.GetStatsRequest(), metadata=(("authorization", f"Bearer {tokens['read']}"),)
        )
        assert not stats.paused

    base = f"http://127.0.0.1:{http_port}/v1"
    assert_openai_error(post(base, chat(vllm_server.model_name)), 401, "API key")
    assert_openai_error(httpx.get(f"{base}/models"), 401, "API key")
    reader = post(
        base, chat(vllm_server.model_name), headers={"Authorization": f"Bearer {tokens['read']}"}
    )
    assert_openai_error(reader, 403, "calls need agent or higher")
    ok = post(
        base, chat(vllm_server.model_name), headers={"Authorization": f"Bearer {tokens['agent']}"}
    )
    assert ok.status_code == 200
    flush = f"http://127.0.0.1:{http_port}/parity/v1/flush"
    assert_openai_error(httpx.post(flush), 401, "API key")
    # Anthropic clients send their key as x-api-key.
    flushed = httpx.post(flush, headers={"x-api-key": tokens["agent"]}, timeout=60)
    assert flushed.json() == {"object": "parity.flush", "captured": 1}, (
        "the answered call is stored"
    )


def test_pause_drains_in_flight_and_holds_new_requests(ingest_stack, vllm_server) -> None:
    base, model = ingest_stack.base_url, vllm_server.model_name
    finished: dict[str, float] = {}
    bodies: dict[str, str] = {}

    def request(name: str, max_tokens: int) -> None:
        response = post(base, chat(model, max_tokens=max_tokens, stream=True, ignore_eos=True))
        bodies[name] = response.text
        finished[name] = time.monotonic()

    with grpc.insecure_channel(ingest_stack.ingest.address) as channel:
        control = pb_grpc.IngestServiceStub(channel)

        def stats() -> pb.GetStatsResponse:
            return control.GetStats(pb.GetStatsRequest())

        # vLLM frozen holds the answer in flight until the pause has reached ingest.
        with engine_frozen(vllm_server):
            in_flight = threading.Thread(target=request, args=("in_flight", 200))
            in_flight.start()
            eventually(lambda: stats().in_flight == 1, what="the request in flight at ingest")
            pausing = control.PauseTraffic.future(pb.PauseTrafficRequest(reason="sync"))
            eventually(lambda: stats().paused, what="ingest paused")
            assert not pausing.done() and "in_flight" not in finished
        paused = pausing.result(60)
        # Pause waited for the request in flight: by ingest's own count it had ended when the pause returned
        # (the client may read its last bytes a moment later); it ran to its end, not cut short.
        assert paused.drained_count == 1 and stats().in_flight == 0
        in_flight.join(60)
        assert (
            bodies["in_flight"].endswith("data: [DONE]\n\n")
            and '"error"' not in bodies["in_flight"]
        )
        held = threading.Thread(target=request, args=("held", 2))
        held.start()
        eventually(lambda: stats().held == 1, what="the new request held at ingest's gate")
        assert "held" not in finished and stats().paused and stats().in_flight == 0
        previous = control.SetPolicyVersion(pb.SetPolicyVersionRequest(policy_version=5))
        resuming_at = time.monotonic()
        resumed = control.ResumeTraffic(pb.ResumeTrafficRequest())
        held.join(60)
        assert finished["held"] > resuming_at and resumed.paused_duration.ToNanoseconds() > 0
        with pytest.raises(grpc.RpcError) as backwards:
            control.SetPolicyVersion(pb.SetPolicyVersionRequest(policy_version=1))
        assert backwards.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    post(ingest_stack.session_url("after-sync"), chat(model)).raise_for_status()
    assert (
        ingest_stack.calls("after-sync")[0].policy_version == 5 > previous.previous_policy_version
    )


def spool_size(ingest) -> int:
    with grpc.insecure_channel(ingest.address) as channel:
        return pb_grpc.IngestServiceStub(channel).GetStats(pb.GetStatsRequest()).spool_size


def test_a_store_outage_spools_calls_and_replays_them_in_order(
    module_services, vllm_server, tmp_path
) -> None:
    store_port = free_port()
    store = module_services.start(
        "store", "--url", f"sqlite:///{tmp_path}/store.db", port=store_port
    )
    ingest, http_port = start_ingest(module_services, store.address, vllm_server.base_url, tmp_path / "spool.db",
                                     "--store-timeout-s", "1")  # fmt: skip
    session_url = f"http://127.0.0.1:{http_port}/sessions/outage/v1"
    post(session_url, chat(vllm_server.model_name, max_tokens=2)).raise_for_status()
    assert (
        len(
            IngestStack(store, ingest, http_port, tmp_path / "spool.db").wait_for_calls("outage", 1)
        )
        == 1
    )
    store.terminate()
    sent = []
    for turn in range(6):
        response = post(
            session_url, chat(vllm_server.model_name, max_tokens=2, user=f"turn-{turn}")
        )
        assert response.status_code == 200, "agents keep working while the store is down"
        sent.append(f"turn-{turn}")
    assert spool_size(ingest) == 6
    restarted = module_services.start(
        "store", "--url", f"sqlite:///{tmp_path}/store.db", port=store_port
    )
    calls = IngestStack(restarted, ingest, http_port, tmp_path / "spool.db").wait_for_calls(
        "outage", 7
    )
    assert [json.loads(c.request_json).get("user") for c in calls[1:]] == sent, (
        "replayed, in capture order"
    )
    # The spool deletes a batch just after the store acknowledges it.
    eventually(
        lambda: spool_size(ingest) == 0,
        timeout_s=10,
        what="the spool forgetting calls the store has",
    )


def test_answered_calls_survive_a_sigkill_of_ingest(module_services, vllm_server, tmp_path) -> None:
    """Durability "before": a call whose response the agent saw is on local disk, even
    if ingest dies before the store could take it."""
    store_port, spool_path = free_port(), tmp_path / "spool.db"
    ingest, http_port = start_ingest(
        module_services, f"127.0.0.1:{store_port}", vllm_server.base_url, spool_path
    )
    session_url = f"http://127.0.0.1:{http_port}/sessions/killed/v1"
    sent = [f"turn-{turn}" for turn in range(5)]
    for user in sent:
        post(session_url, chat(vllm_server.model_name, max_tokens=2, user=user)).raise_for_status()
    ingest.process.kill()
    ingest.process.wait()
    store = module_services.start(
        "store", "--url", f"sqlite:///{tmp_path}/store.db", port=store_port
    )
    restarted, restarted_port = start_ingest(
        module_services, store.address, vllm_server.base_url, spool_path
    )
    calls = IngestStack(store, restarted, restarted_port, spool_path).wait_for_calls(
        "killed", len(sent)
    )
    assert [json.loads(c.request_json).get("user") for c in calls] == sent, (
        "every answered call, in order"
    )


def test_durability_after_answers_first_and_still_stores_every_call(
    module_services, vllm_server, tmp_path
) -> None:
    store = module_services.start("store", "--url", "memory://")
    ingest, http_port = start_ingest(module_services, store.address, vllm_server.base_url, tmp_path / "spool.db",
                                     "--durability", "after")  # fmt: skip
    sent = [f"turn-{turn}" for turn in range(4)]
    for user in sent:
        post(
            f"http://127.0.0.1:{http_port}/sessions/after-1/v1",
            chat(vllm_server.model_name, user=user),
        ).raise_for_status()
    calls = IngestStack(store, ingest, http_port, tmp_path / "spool.db").wait_for_calls(
        "after-1", len(sent)
    )
    assert [json.loads(c.request_json).get("user") for c in calls] == sent


def test_a_full_spool_refuses_with_503_until_the_store_returns(
    module_services, vllm_server, tmp_path
) -> None:
    spool_path = tmp_path / "spool.db"
    spool = Spool(spool_path, max_bytes=1 << 20)
    filler = llm_call_pb2.LlmCall(
        call_id="filler", session_id="filler", request_json=b"x" * (1 << 20)
    )
    spool.append([filler.SerializeToString()])
    spool.close()
    store_port = free_port()
    _, http_port = start_ingest(module_services, f"127.0.0.1:{store_port}", vllm_server.base_url, spool_path,
                                "--spool-max-mb", "1", "--store-timeout-s", "1")  # fmt: skip
    base = f"http://127.0.0.1:{http_port}/v1"
    assert_openai_error(post(base, chat(vllm_server.model_name)), 503, "capture spool is full")
    module_services.start("store", "--url", "memory://", port=store_port)
    eventually(lambda: post(base, chat(vllm_server.model_name)).status_code == 200, interval_s=0.5,
               what="the spool draining once the store is back, and calls answered again")  # fmt: skip


def test_a_dying_upstream_gets_502_and_timeouts_504(
    module_services, tiny_model_dir, tmp_path
) -> None:
    doomed = VllmServer(VllmLaunchConfig(model_path=tiny_model_dir, port=free_port(), served_model_name="doomed",
                                         log_path=tmp_path / "doomed.log"))  # fmt: skip
    with doomed:
        store = module_services.start("store", "--url", "memory://")
        _, http_port = start_ingest(module_services, store.address, doomed.base_url, tmp_path / "spool.db",
                                    "--health-interval-s", "30", "--upstream-retries", "1")  # fmt: skip
        _, slow_port = start_ingest(module_services, store.address, doomed.base_url, tmp_path / "spool2.db",
                                    "--upstream-timeout-s", "0.05")  # fmt: skip
        base = f"http://127.0.0.1:{http_port}/v1"
        assert post(base, chat("doomed")).status_code == 200
        assert_openai_error(
            post(f"http://127.0.0.1:{slow_port}/v1", chat("doomed", max_tokens=400)),
            504,
            "did not answer",
        )
        # vLLM's ZeroMQ sockets, which it never removes, go in a directory of its own.
        temp_dir = doomed.temp_dir
        assert temp_dir is not None and any(temp_dir.iterdir())
    assert not temp_dir.exists()
    assert_openai_error(post(base, chat("doomed")), 502, "upstream failed after 2 attempts")
    # Unhealthy now, but still its model's only replica: tried again, not refused outright.
    assert_openai_error(post(base, chat("doomed")), 502, "Connection refused")

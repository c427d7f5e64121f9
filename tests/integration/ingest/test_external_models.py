"""Models not being trained go through LiteLLM and are captured as external calls."""

from __future__ import annotations

import openai
import pytest

from parity.api.common.v1 import llm_call_pb2
from tests.integration.stack_fixtures import IngestStack, start_ingest
from tests.integration.tcp_relay import TcpRelay

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


def judge_stack(module_services, vllm_server, judge_base_url: str, tmp_path) -> IngestStack:
    """A store and an ingest serving the policy from vLLM and a `judge` through LiteLLM,
    whose OpenAI-compatible provider points at `judge_base_url`: any provider LiteLLM
    supports is configured the same way."""
    config = tmp_path / "external.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: judge\n"
        "    litellm_params:\n"
        f"      model: openai/{vllm_server.model_name}\n"
        f"      api_base: {judge_base_url}\n"
        "      api_key: unused\n"
    )
    store = module_services.start("store", "--url", "memory://")
    ingest, http_port = start_ingest(module_services, store.address, vllm_server.base_url, tmp_path / "spool.db",
                                     "--external-models", str(config))  # fmt: skip
    return IngestStack(store, ingest, http_port, tmp_path / "spool.db")


def test_a_judge_model_routes_through_litellm_and_is_never_policy_data(
    module_services, vllm_server, tmp_path
) -> None:
    stack = judge_stack(module_services, vllm_server, vllm_server.openai_base_url, tmp_path)
    client = openai.OpenAI(base_url=stack.session_url("judged"), api_key="unused", max_retries=0)
    assert {m.id for m in client.models.list().data} == {vllm_server.model_name, "judge"}
    verdict = client.chat.completions.create(model="judge", messages=[{"role": "user", "content": "Score it."}],
                                             max_tokens=4)  # fmt: skip
    streamed = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in client.chat.completions.create(
            model="judge",
            messages=[{"role": "user", "content": "Again."}],
            max_tokens=4,
            stream=True,
        )
        if chunk.choices
    )
    policy = client.chat.completions.create(model=vllm_server.model_name, messages=[{"role": "user", "content": "x"}],
                                            max_tokens=2)  # fmt: skip
    judged, judged_stream, policy_call = stack.calls("judged")
    assert (judged.kind, judged_stream.kind) == (llm_call_pb2.CALL_KIND_EXTERNAL,) * 2
    assert (
        judged.replica == "litellm" and judged.choices[0].text == verdict.choices[0].message.content
    )
    assert judged_stream.streamed and judged_stream.choices[0].text == streamed
    assert policy_call.kind == llm_call_pb2.CALL_KIND_POLICY and policy.choices


def test_an_external_model_that_fails_is_a_502_and_a_recorded_failed_external_call(
    module_services, vllm_server, relay: TcpRelay, tmp_path
) -> None:
    stack = judge_stack(module_services, vllm_server, f"http://127.0.0.1:{relay.port}/v1", tmp_path)
    client = openai.OpenAI(
        base_url=stack.session_url("judge-down"), api_key="unused", max_retries=0
    )
    relay.cut()
    for stream in (False, True):
        with pytest.raises(
            openai.InternalServerError, match="external model 'judge' failed"
        ) as refused:
            client.chat.completions.create(model="judge", messages=[{"role": "user", "content": "Score it."}],
                                           max_tokens=4, stream=stream)  # fmt: skip
        assert refused.value.status_code == 502

    calls = stack.calls("judge-down")
    assert [call.streamed for call in calls] == [False, True]
    for call in calls:
        assert call.kind == llm_call_pb2.CALL_KIND_EXTERNAL and call.replica == "litellm"
        assert (
            call.outcome == llm_call_pb2.CALL_OUTCOME_UPSTREAM_ERROR
            and "judge" in call.error_message
        )

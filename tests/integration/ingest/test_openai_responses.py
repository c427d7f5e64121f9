"""/v1/responses through ingest, with the official openai SDK and the OpenAI Agents SDK unchanged: token-exact
capture, answers that match vLLM's own /v1/responses, and previous_response_id chains that survive a restart."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import httpx
import numpy as np
import openai
import pytest
from openai.types.responses import FunctionToolParam, ResponseInputItemParam
from transformers import AutoTokenizer

from parity.api.common.v1 import llm_call_pb2
from tests.integration.codex_cli import as_vllm_serves
from tests.integration.stack_fixtures import start_ingest

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]

# The small model's tokenizer corpus holds calculator calls, so it closes a call to a tool of that name.
ADD: dict[str, Any] = {"type": "function", "name": "calculator", "description": "Add two integers.",
       "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                      "required": ["a", "b"]}}  # fmt: skip
# ADD as agents send it, without `strict`: the API takes that, and openai's FunctionToolParam requires the key.
ADD_TOOL = cast(FunctionToolParam, ADD)


def client(ingest_stack, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=ingest_stack.session_url(session), api_key="any-key")


def ids(packed: bytes) -> list[int]:
    return np.frombuffer(packed, dtype="<i4").tolist()


def merged_types(types: list[str]) -> list[str]:
    """Event types with each run of deltas counted once."""
    return [
        kind
        for index, kind in enumerate(types)
        if not (kind.endswith(".delta") and index and types[index - 1] == kind)
    ]


def rendered(vllm_server, request: dict) -> list[int]:
    response = httpx.post(f"{vllm_server.base_url}/v1/responses/render", json=request, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["token_ids"]


def test_a_response_is_captured_token_exactly_and_answers_as_vllm_does(
    ingest_stack, vllm_server
) -> None:
    request = {"model": vllm_server.model_name, "input": "What is 2 + 3?", "instructions": "Answer briefly.",
               "max_output_tokens": 12, "temperature": 0}  # fmt: skip
    response = client(ingest_stack, "responses-plain").responses.create(**request)
    [call] = ingest_stack.wait_for_calls("responses-plain", 1)
    assert (
        call.endpoint == llm_call_pb2.CALL_ENDPOINT_RESPONSES
        and response.id == f"resp_{call.call_id}"
    )
    assert ids(call.prompt_token_ids) == rendered(vllm_server, request)
    tokenizer = AutoTokenizer.from_pretrained(vllm_server.config.model_path)
    assert (
        tokenizer.decode(ids(call.choices[0].token_ids), skip_special_tokens=True)
        == response.output_text
    )

    direct = httpx.post(f"{vllm_server.base_url}/v1/responses", json=request, timeout=60).json()
    ours = response.model_dump(mode="json")
    for key in ("object", "model", "status", "instructions", "max_output_tokens", "temperature", "top_p",
                "tool_choice", "tools", "parallel_tool_calls", "truncation", "incomplete_details"):  # fmt: skip
        assert ours[key] == direct[key], key
    assert ours["usage"]["input_tokens"] == direct["usage"]["input_tokens"]
    assert ours["usage"]["output_tokens"] == direct["usage"]["output_tokens"]
    assert [
        (i["type"], i.get("role"), [c["text"] for c in i.get("content") or []])
        for i in ours["output"]
    ] == [
        (i["type"], i.get("role"), [c["text"] for c in i.get("content") or []])
        for i in direct["output"]
    ]


def test_streamed_events_match_vllms(ingest_stack, vllm_server) -> None:
    request = {"model": vllm_server.model_name, "input": "Describe the sea.", "max_output_tokens": 10,
               "temperature": 0, "stream": True}  # fmt: skip
    ours = list(client(ingest_stack, "responses-stream").responses.create(**request))
    direct = [json.loads(line[6:]) for line in httpx.post(f"{vllm_server.base_url}/v1/responses", json=request,
              timeout=60).iter_lines() if line.startswith("data: ")]  # fmt: skip
    assert [event.sequence_number for event in ours] == list(range(len(ours)))
    # vLLM sends as many tokens per delta as its engine step produced, which varies run to run.
    assert merged_types([event.type for event in ours]) == merged_types(
        [event["type"] for event in direct]
    )
    deltas = [event.delta for event in ours if event.type == "response.output_text.delta"]
    assert "".join(deltas) == "".join(
        event["delta"] for event in direct if event["type"] == "response.output_text.delta"
    )
    completed = ours[-1].response
    assert completed.status == direct[-1]["response"][
        "status"
    ] and completed.output_text == "".join(deltas)
    [call] = ingest_stack.wait_for_calls("responses-stream", 1)
    assert call.streamed and completed.id == f"resp_{call.call_id}"


def test_a_function_call_chain_continues_by_previous_response_id_even_after_a_restart(
    ingest_stack, vllm_server, module_services, tmp_path
) -> None:
    first = client(ingest_stack, "responses-chain").responses.create(
        model=vllm_server.model_name, input="What is 2 + 3?", tools=[ADD_TOOL], tool_choice={"type": "function", "name": "calculator"},
        max_output_tokens=200, temperature=0,
    )  # fmt: skip
    [call_item] = [item for item in first.output if item.type == "function_call"]
    assert call_item.name == "calculator"
    second_input: list[ResponseInputItemParam] = [
        {"type": "function_call_output", "call_id": call_item.call_id, "output": "5"}
    ]
    second = client(ingest_stack, "responses-chain").responses.create(
        model=vllm_server.model_name, previous_response_id=first.id, input=second_input, tools=[ADD_TOOL],
        max_output_tokens=8, temperature=0,
    )  # fmt: skip
    calls = sorted(
        ingest_stack.wait_for_calls("responses-chain", 2),
        key=lambda c: c.timings.start_time.ToNanoseconds(),
    )
    # The chained request's prompt is the whole conversation as one request would render it.
    whole: dict[str, Any] = {"model": vllm_server.model_name, "tools": [ADD], "input": [
        {"type": "message", "role": "user", "content": "What is 2 + 3?"},
        {"type": "function_call", "call_id": call_item.call_id, "name": "calculator", "arguments": call_item.arguments},
        *second_input,
    ]}  # fmt: skip
    assert ids(calls[1].prompt_token_ids) == rendered(vllm_server, whole)

    # Another ingest on the same store, which never saw the chain, continues it from the store.
    fresh, http_port = start_ingest(
        module_services, ingest_stack.store.address, vllm_server.base_url, tmp_path / "spool.db"
    )
    third = openai.OpenAI(base_url=f"http://127.0.0.1:{http_port}/sessions/responses-chain/v1", api_key="k").responses.create(
        model=vllm_server.model_name, previous_response_id=second.id, input="Thanks.", tools=[ADD_TOOL], max_output_tokens=4,
    )  # fmt: skip
    calls = sorted(
        ingest_stack.wait_for_calls("responses-chain", 3),
        key=lambda c: c.timings.start_time.ToNanoseconds(),
    )
    assert ids(calls[2].prompt_token_ids)[: len(ids(calls[1].prompt_token_ids))] == ids(
        calls[1].prompt_token_ids
    )
    assert third.previous_response_id == second.id

    with pytest.raises(openai.NotFoundError) as missing:
        client(ingest_stack, "responses-chain").responses.create(
            model=vllm_server.model_name, previous_response_id="resp_nothing_like_it", input="hi"
        )
    assert (
        isinstance(missing.value.body, dict)
        and missing.value.body["param"] == "previous_response_id"
    )


def test_the_agents_sdk_runs_a_tool_agent_on_its_default_responses_model(
    ingest_stack, vllm_server
) -> None:
    from agents import (
        Agent,
        OpenAIResponsesModel,
        RunConfig,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = OpenAIResponsesModel(vllm_server.model_name, openai.AsyncOpenAI(
        base_url=ingest_stack.session_url("agents-sdk"), api_key="any-key"))  # fmt: skip
    agent = Agent(name="adder", instructions="Use the add tool.", tools=[add], model=model)

    async def run() -> None:
        try:
            await Runner.run(
                agent, "What is 2 + 3?", max_turns=2, run_config=RunConfig(tracing_disabled=True)
            )
        except Exception as error:  # noqa: BLE001 - a random model may call the tool badly or run out of turns
            assert type(error).__name__ in ("MaxTurnsExceeded", "ModelBehaviorError"), error

    asyncio.run(run())
    calls = ingest_stack.wait_for_calls("agents-sdk", 1)
    assert calls and all(c.endpoint == llm_call_pb2.CALL_ENDPOINT_RESPONSES for c in calls)
    assert all(
        c.outcome == llm_call_pb2.CALL_OUTCOME_SUCCEEDED and c.choices[0].token_ids for c in calls
    )


@pytest.mark.parametrize(
    ("extra", "param", "fragment"),
    [
        ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "input.0.content.0", "image inputs are not supported"),
        ({"input": [{"type": "function_call_output", "call_id": "call_1", "output": "5"}]}, "input.0.call_id",
         "which no earlier function_call has"),
        ({"input": [{"type": "web_search_call"}]}, "input.0.type", "is not supported"),
        ({"input": "hi", "tools": [{"type": "file_search"}]}, "tools.0.type", "only function and custom tools"),
        # What Codex CLI sends that still cannot be served: a hosted tool, a tool search's items.
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools.0.type", 'web_search = "disabled"'),
        ({"input": [{"type": "tool_search_call", "arguments": {"query": "x"}}]}, "input.0.type",
         "'tool_search_call' is not supported"),
        ({"input": [{"type": "additional_tools", "role": "developer", "tools": [{"type": "image_generation"}]}]},
         "input.0.tools.0.type", "not supported"),
    ],
)  # fmt: skip
def test_bad_input_gets_openais_error_shape_naming_the_field(
    ingest_stack, vllm_server, extra, param, fragment
) -> None:
    session = f"responses-bad-{param.replace('.', '-')}"
    with pytest.raises(openai.BadRequestError) as raised:
        client(ingest_stack, session).responses.create(model=vllm_server.model_name, **extra)
    body = raised.value.body
    assert isinstance(body, dict) and body["param"] == param and fragment in body["message"]
    assert ingest_stack.calls_after_flush(session) == []


def test_a_websocket_handshake_is_refused_so_clients_fall_back_to_http(ingest_stack) -> None:
    # Codex CLI tries the Responses API over a WebSocket first, and uses HTTP when refused.
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}  # fmt: skip
    refused = httpx.get(
        f"{ingest_stack.session_url('websocket')}/responses", headers=upgrade, timeout=10
    )
    # 426 Upgrade Required, which Codex takes as "use HTTP" at once (a 403 or 404 it retries with backoff).
    assert refused.status_code == 426 and refused.json()["error"]["type"] == "invalid_request_error"
    assert (
        httpx.get(f"http://127.0.0.1:{ingest_stack.http_port}/health", timeout=10).status_code
        == 200
    )


CUSTOM_ADD = {
    "type": "custom",
    "name": "calculator",
    "description": "Add two integers, as free text.",
}
MATH = {"type": "namespace", "name": "math", "description": "Arithmetic.", "tools": [ADD]}


def test_custom_and_namespaced_tools_are_served_as_vllm_serves_them(
    ingest_stack, vllm_server
) -> None:
    """What vLLM's own Responses API serves of what Codex sends: the prompt is vLLM's rendering, a call comes back
    as the tool was declared, and the conversation goes on with its output.

    The small model, made to call the namespaced function, finishes its two integers within the tokens given; made
    to call the free-form tool, it writes on to the limit. That call is the agent's own in the conversation, and the
    shape of a generated one is tests/unit/ingest/endpoints/openai_responses/test_tool_catalog.py's."""
    session = "responses-custom-tools"
    custom_call = {
        "type": "custom_tool_call",
        "call_id": "call_custom",
        "name": "calculator",
        "input": "2 + 3",
    }
    for tools, choice, kind in (([CUSTOM_ADD], {"type": "custom", "name": "calculator"}, "custom_tool_call"),
                                ([MATH], {"type": "function", "name": "calculator"}, "function_call")):  # fmt: skip
        request = {"model": vllm_server.model_name, "input": "What is 2 + 3?", "tools": tools, "tool_choice": choice,
                   "max_output_tokens": 200, "temperature": 0}  # fmt: skip
        response = httpx.post(
            f"{ingest_stack.session_url(session)}/responses", json=request, timeout=120
        )
        assert response.status_code == 200, response.text
        made_items = [item for item in response.json()["output"] if item["type"] != "message"]
        if kind == "custom_tool_call":
            assert not made_items or made_items[0]["type"] == kind, response.json()
            made = custom_call
        else:
            assert len(made_items) == 1, response.json()
            [made] = made_items
            assert made["type"] == kind and made["name"] == "calculator"
            assert made["namespace"] == "math"
        output = "custom_tool_call_output" if kind == "custom_tool_call" else "function_call_output"
        replayed = {k: v for k, v in made.items() if v is not None and k not in ("id", "status")}
        following = request | {"tool_choice": "auto", "max_output_tokens": 4, "input": [
            {"type": "message", "role": "user", "content": "What is 2 + 3?"}, replayed,
            {"type": output, "call_id": made["call_id"], "output": "5"}]}  # fmt: skip
        answered = httpx.post(
            f"{ingest_stack.session_url(session)}/responses", json=following, timeout=120
        )
        assert answered.status_code == 200, answered.text
    calls = sorted(
        ingest_stack.wait_for_calls(session, 4), key=lambda c: c.timings.start_time.ToNanoseconds()
    )
    for call in calls:
        request = json.loads(call.request_json)
        assert ids(call.prompt_token_ids) == rendered(vllm_server, request)


def test_codexs_own_items_render_as_the_request_vllm_serves_does(ingest_stack, vllm_server) -> None:
    """What vLLM does not serve is translated into what it does: tools of an additional_tools item, a custom tool in
    a namespace or with a grammar, a configuration update; the prompt is vLLM's rendering of the translation."""
    grammar = {"type": "grammar", "syntax": "lark", "definition": 'start: "a"'}
    codex = {"model": vllm_server.model_name, "max_output_tokens": 4, "temperature": 0, "reasoning": {"effort": "low"},
             "tool_choice": "auto", "input": [
        {"type": "additional_tools", "role": "developer", "tools": [
            {"type": "namespace", "name": "functions", "description": "", "tools": [
                CUSTOM_ADD | {"name": "exec", "format": grammar}, ADD]},
            CUSTOM_ADD | {"name": "apply_patch", "format": grammar}]},
        {"type": "message", "role": "user", "content": "What is 2 + 3?"},
        {"type": "custom_tool_call", "call_id": "c1", "namespace": "functions", "name": "exec", "input": "2 + 3"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "5"},
        {"type": "configuration_update", "reasoning": {"effort": "high"}}]}  # fmt: skip
    answered = httpx.post(
        f"{ingest_stack.session_url('responses-codex-items')}/responses", json=codex, timeout=120
    )
    assert answered.status_code == 200, answered.text
    [call] = ingest_stack.wait_for_calls("responses-codex-items", 1)
    servable = as_vllm_serves(codex) | {"reasoning": {"effort": "high"}}
    assert ids(call.prompt_token_ids) == rendered(vllm_server, servable)

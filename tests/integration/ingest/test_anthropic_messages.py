"""/v1/messages through ingest, with the official anthropic SDK unchanged: token-exact capture, and answers
that match vLLM's own /v1/messages field for field and event for event."""

from __future__ import annotations

import json

import anthropic
import httpx
import numpy as np
import pytest
from transformers import AutoTokenizer

from parity.api.common.v1 import llm_call_pb2

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]

CALCULATOR = {
    "name": "calculator", "description": "Add two integers.",
    "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
}  # fmt: skip


def client(ingest_stack, session: str) -> anthropic.Anthropic:
    # Anthropic clients add /v1/messages to the base URL themselves.
    return anthropic.Anthropic(
        base_url=ingest_stack.session_url(session).removesuffix("/v1"), api_key="any-key"
    )


def sdk(request: dict) -> dict:
    """The request as the SDK's arguments: today's SDK has no sampling parameters, so they travel as extra body."""
    sampling = {key: request[key] for key in ("temperature", "top_p", "top_k") if key in request}
    return {key: value for key, value in request.items() if key not in sampling} | {
        "extra_body": sampling
    }


def ids(packed: bytes) -> list[int]:
    return np.frombuffer(packed, dtype="<i4").tolist()


def rendered(vllm_server, request: dict) -> list[int]:
    """The prompt vLLM's own /v1/messages renders for `request`."""
    response = httpx.post(f"{vllm_server.base_url}/v1/messages/render", json=request, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["token_ids"]


def events(response: httpx.Response) -> list[tuple[str | None, dict]]:
    parsed: list[tuple[str | None, dict]] = []
    name = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            parsed.append((name, json.loads(line[6:])))
    return parsed


def comparable(stream: list[tuple[str | None, dict]]) -> list[tuple[str | None, dict]]:
    """Events without what is random per answer (ids, thinking signatures), and each run of deltas of one block
    joined: vLLM sends as many tokens per event as its engine step produced, which varies run to run."""
    result: list[tuple[str | None, dict]] = []
    for name, data in stream:
        data = json.loads(json.dumps(data))
        data.get("message", {}).pop("id", None)
        data.get("content_block", {}).pop("id", None)
        delta = data.get("delta", {})
        if delta.get("type") == "signature_delta":
            delta.pop("signature")
        previous = result[-1][1].get("delta", {}) if result else {}
        if (
            name == "content_block_delta"
            and result
            and result[-1][0] == name
            and previous.get("type") == delta.get("type")
        ):
            for key in ("text", "thinking", "partial_json"):
                if key in delta:
                    previous[key] += delta[key]
            continue
        result.append((name, data))
    return result


def test_a_message_is_captured_token_exactly_and_answers_as_vllm_does(
    ingest_stack, vllm_server
) -> None:
    request = {"model": vllm_server.model_name, "max_tokens": 12, "temperature": 0,
               "system": "You add numbers.", "messages": [{"role": "user", "content": "What is 2 + 3?"}]}  # fmt: skip
    message = client(ingest_stack, "anthropic-plain").messages.create(**sdk(request))
    [call] = ingest_stack.wait_for_calls("anthropic-plain", 1)
    assert call.endpoint == llm_call_pb2.CALL_ENDPOINT_ANTHROPIC_MESSAGES
    assert json.loads(call.request_json) == request
    assert ids(call.prompt_token_ids) == rendered(vllm_server, request)
    sampled = ids(call.choices[0].token_ids)
    assert len(sampled) == message.usage.output_tokens and len(call.choices[0].logprobs) == 4 * len(
        sampled
    )
    tokenizer = AutoTokenizer.from_pretrained(vllm_server.config.model_path)
    assert tokenizer.decode(sampled, skip_special_tokens=True) == message.content[0].text

    direct = httpx.post(f"{vllm_server.base_url}/v1/messages", json=request, timeout=60).json()
    ours = message.model_dump(exclude_none=True)
    for key in ("type", "role", "model", "content", "stop_reason", "usage"):
        assert ours[key] == direct[key], key


def test_a_streamed_tool_round_trip_matches_vllms_events(ingest_stack, vllm_server) -> None:
    request = {"model": vllm_server.model_name, "max_tokens": 40, "temperature": 0, "tools": [CALCULATOR],
               "tool_choice": {"type": "tool", "name": "calculator"},
               "messages": [{"role": "user", "content": "What is 2 + 3?"}]}  # fmt: skip
    # Streamed through the SDK: its raw events (the small model's arguments are seldom valid JSON, which the
    # SDK's accumulating helper would refuse; vLLM's own endpoint streams the same arguments).
    kinds = [
        event.type
        for event in client(ingest_stack, "anthropic-tools").messages.create(
            **sdk(request), stream=True
        )
    ]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert "content_block_start" in kinds and "content_block_delta" in kinds
    streamed_ours = events(httpx.post(f"{ingest_stack.base_url.removesuffix('/v1')}/v1/messages",
                                      json={**request, "stream": True}, timeout=60))  # fmt: skip
    streamed_vllm = events(
        httpx.post(
            f"{vllm_server.base_url}/v1/messages", json={**request, "stream": True}, timeout=60
        )
    )
    assert comparable(streamed_ours) == comparable(streamed_vllm)
    assert streamed_ours[1][1]["content_block"]["type"] == "tool_use"

    # Long enough for the forced call to close. Its arguments are a JSON string, not an object (a random model's);
    # vLLM's own endpoint answers that with a 400, ingest with the tool use and an empty input.
    first = client(ingest_stack, "anthropic-tools").messages.create(
        **sdk({**request, "max_tokens": 200})
    )
    [tool_use] = [block for block in first.content if block.type == "tool_use"]
    assert first.stop_reason == "tool_use" and tool_use.name == "calculator"
    follow_up = {**request, "tool_choice": {"type": "auto"}, "messages": [
        *request["messages"], {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "5"}]},
    ]}  # fmt: skip
    second = client(ingest_stack, "anthropic-tools").messages.create(**sdk(follow_up))
    assert second.content
    calls = ingest_stack.wait_for_calls("anthropic-tools", 3)
    assert ids(calls[2].prompt_token_ids) == rendered(vllm_server, follow_up)


def test_count_tokens_is_vllms(ingest_stack, vllm_server) -> None:
    request = {"model": vllm_server.model_name, "messages": [{"role": "user", "content": "Count these tokens."}],
               "tools": [CALCULATOR]}  # fmt: skip
    ours = client(ingest_stack, "anthropic-count").messages.count_tokens(**request)
    direct = httpx.post(
        f"{vllm_server.base_url}/v1/messages/count_tokens", json=request, timeout=60
    ).json()
    assert ours.input_tokens == direct["input_tokens"] > 0


@pytest.mark.parametrize(
    ("messages", "field", "fragment"),
    [
        ([{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AA=="}}]}],
         "messages.0.content.0", "image blocks are not supported"),
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "5"}]}],
         "messages.0.content.0.tool_use_id", "no earlier tool_use block has"),
        ([{"role": "user", "content": [{"type": "sparkles"}]}], "messages.0.content.0.type", "unknown content block type"),
        ([{"role": "robot", "content": "hi"}], "messages.0.role", "role must be one of"),
    ],
)  # fmt: skip
def test_bad_input_gets_anthropics_error_shape_and_nothing_is_recorded(
    ingest_stack, vllm_server, messages, field, fragment
) -> None:
    session = f"anthropic-bad-{field.replace('.', '-')}"
    with pytest.raises(anthropic.BadRequestError) as raised:
        client(ingest_stack, session).messages.create(
            model=vllm_server.model_name, max_tokens=4, messages=messages
        )
    body = raised.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(field) and fragment in body["error"]["message"]
    assert ingest_stack.calls_after_flush(session) == []
    assert (
        client(ingest_stack, session)
        .messages.create(
            model=vllm_server.model_name,
            max_tokens=2,
            messages=[{"role": "user", "content": "still up?"}],
        )
        .content
        is not None
    )

"""Ingest in front of real vLLM: the ids it records are exactly the ones vLLM generated."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from typing import Any

import httpx
import openai
import pytest
from openai.types.shared_params import ResponseFormatJSONSchema
from transformers import AutoTokenizer

from parity.core import tokens
from parity.core.session_slug import SessionRef, encode
from tests.integration.openai_api import as_messages, as_tools, sampled_logprobs, vllm_field

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]

ADD_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]},
    },
}  # fmt: skip
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "What is 2 + 3?"}]
MAX_TOOL_SAMPLES = 8


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0)


def ids(packed: bytes) -> list[int]:
    return tokens.unpack_token_ids(packed).tolist()


def test_non_streamed_chat_records_exactly_what_vllm_returned(
    ingest_stack, vllm_server, tokenizer
) -> None:
    sent_ms = time.time_ns() // 1_000_000
    response = client(ingest_stack.session_url("exact-1")).chat.completions.create(
        model=vllm_server.model_name, messages=as_messages(MESSAGES), max_tokens=12, n=2, logprobs=True,
        extra_body={"return_token_ids": True},
    )  # fmt: skip
    (call,) = ingest_stack.calls("exact-1")
    expected_prompt = tokenizer.apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert ids(call.prompt_token_ids) == vllm_field(response, "prompt_token_ids") == expected_prompt
    assert len(call.choices) == 2
    for choice, recorded in zip(response.choices, call.choices, strict=True):
        assert ids(recorded.token_ids) == vllm_field(choice, "token_ids")
        assert tokens.unpack_floats(recorded.logprobs).tolist() == pytest.approx(
            [entry.logprob for entry in sampled_logprobs(choice)], abs=1e-6
        )
        assert (
            recorded.text == choice.message.content
            and recorded.finish_reason == choice.finish_reason
        )
    assert call.model == vllm_server.model_name and call.replica and call.outcome == 1
    # A time-ordered id (UUIDv7), so the store's call_id index grows at its right edge.
    assert uuid.UUID(call.call_id).version == 7 and int(call.call_id[:12], 16) >= sent_ms
    assert json.loads(call.request_json)["messages"] == MESSAGES, (
        "the request is kept as the agent sent it"
    )
    assert call.timings.upstream_attempts == 1 and call.usage.completion_tokens == sum(
        len(vllm_field(c, "token_ids")) for c in response.choices
    )


def test_streamed_chat_is_assembled_from_chunks(ingest_stack, vllm_server) -> None:
    stream = client(ingest_stack.session_url("stream-1")).chat.completions.create(
        model=vllm_server.model_name, messages=as_messages(MESSAGES), max_tokens=10, n=2, stream=True, logprobs=True,
        stream_options={"include_usage": True}, extra_body={"return_token_ids": True},
    )  # fmt: skip
    streamed: dict[int, list[int]] = {0: [], 1: []}
    prompt, usage = None, None
    for chunk in stream:
        prompt = prompt or (chunk.model_extra or {}).get("prompt_token_ids")
        usage = chunk.usage or usage
        for choice in chunk.choices:
            streamed[choice.index] += (choice.model_extra or {}).get("token_ids") or []
    (call,) = ingest_stack.calls("stream-1")
    assert call.streamed and ids(call.prompt_token_ids) == prompt
    assert {c.index: ids(c.token_ids) for c in call.choices} == streamed
    assert usage is not None and call.usage.completion_tokens == usage.completion_tokens


def test_tool_calls_are_captured_with_their_tokens(ingest_stack, vllm_server, tokenizer) -> None:
    conversation: list[dict[str, Any]] = [
        {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
        {"role": "user", "content": "Now add 5 and 4."},
    ]  # fmt: skip
    for stream in (False, True):
        session = f"tools-{stream}"
        # A random model does not always produce a parseable tool call; sample until it does.
        for _ in range(MAX_TOOL_SAMPLES):
            result = client(ingest_stack.session_url(session)).chat.completions.create(
                model=vllm_server.model_name, messages=as_messages(conversation), tools=as_tools([ADD_TOOL]), max_tokens=40, stream=stream,
                tool_choice={"type": "function", "function": {"name": "add"}}, extra_body={"return_token_ids": True},
            )  # fmt: skip
            generated: list[int] = []
            tool_calls: dict[int, list[object]] = {}
            if isinstance(result, openai.Stream):
                for chunk in result:
                    for choice in chunk.choices:
                        generated += (choice.model_extra or {}).get("token_ids") or []
                        for delta in choice.delta.tool_calls or ():
                            tool_calls.setdefault(delta.index, []).append(delta)
            else:
                generated = vllm_field(result.choices[0], "token_ids")
                tool_calls = {
                    index: [call]
                    for index, call in enumerate(result.choices[0].message.tool_calls or ())
                }
            if tool_calls:
                break
        call = ingest_stack.calls(session)[-1]
        expected_prompt = tokenizer.apply_chat_template(
            conversation,
            tools=[ADD_TOOL],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        assert ids(call.prompt_token_ids) == expected_prompt
        assert ids(call.choices[0].token_ids) == generated
        assert tool_calls, f"no tool call in {MAX_TOOL_SAMPLES} samples"
        assert json.loads(call.choices[0].tool_calls_json)[0]["function"]["name"] == "add"


def test_completions_endpoint_streamed_and_not(ingest_stack, vllm_server, tokenizer) -> None:
    api = client(ingest_stack.session_url("completions-1"))
    whole = api.completions.create(model=vllm_server.model_name, prompt="2 + 3 =", max_tokens=6,
                                   extra_body={"return_token_ids": True})  # fmt: skip
    parts = []
    for chunk in api.completions.create(
        model=vllm_server.model_name, prompt="2 + 3 =", max_tokens=6, stream=True
    ):
        parts.append(chunk.choices[0].text)
    first, second = ingest_stack.calls("completions-1")
    assert ids(first.prompt_token_ids) == tokenizer("2 + 3 =")["input_ids"]
    assert ids(first.choices[0].token_ids) == vllm_field(whole.choices[0], "token_ids")
    assert second.streamed and second.choices[0].text == "".join(parts)
    assert (
        len(tokens.unpack_floats(second.choices[0].logprobs))
        == len(ids(second.choices[0].token_ids))
        > 0
    )


def test_the_agent_sees_what_vllm_would_have_sent(ingest_stack, vllm_server) -> None:
    request = {
        "model": vllm_server.model_name,
        "messages": MESSAGES,
        "max_tokens": 8,
        "seed": 7,
        "temperature": 1.0,
    }
    direct_reply = httpx.post(
        f"{vllm_server.openai_base_url}/chat/completions", json=request, timeout=60
    )
    proxied_reply = httpx.post(
        f"{ingest_stack.base_url}/chat/completions", json=request, timeout=60
    )
    for reply in (direct_reply, proxied_reply):
        assert (
            int(reply.headers["content-length"]) == len(reply.content)
            and "transfer-encoding" not in reply.headers
        )
    direct, proxied = direct_reply.json(), proxied_reply.json()
    for response in (direct, proxied):
        response.pop("id"), response.pop("created")
    assert proxied == direct, "ingest must strip exactly what it added for capture"
    assert proxied["choices"][0]["logprobs"] is None and proxied["prompt_token_ids"] is None


def _stream(reply: httpx.Response) -> dict:
    """What a stream says, however vLLM cut it into chunks: as timing falls, a chunk holds
    one token or several, and the finish reason comes with the last token or alone. Every
    field of every chunk is kept, apart from those that differ between any two requests;
    the text is joined per choice."""
    lines = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    texts: dict[int, str] = {}
    fields: set[tuple[str, str]] = set()
    for chunk in (json.loads(line) for line in lines[:-1]):
        chunk.pop("id"), chunk.pop("created")
        for choice in chunk.pop("choices"):
            delta = choice.pop("delta", {})
            text = choice.pop("text", None) or delta.pop("content", None) or ""
            texts[choice["index"]] = texts.get(choice["index"], "") + text
            fields |= {
                (f"choice.{key}", json.dumps(value))
                for key, value in choice.items()
                if key != "finish_reason"
            }
            fields |= {(f"delta.{key}", json.dumps(value)) for key, value in delta.items()}
            if choice["finish_reason"] is not None:
                fields.add(("finish_reason", choice["finish_reason"]))
        fields |= {(key, json.dumps(value, sort_keys=True)) for key, value in chunk.items()}
    return {"texts": texts, "fields": fields}


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        (
            "chat/completions",
            {"messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}},
        ),
        ("completions", {"prompt": "2 + 3 =", "stream": True}),
        ("completions", {"prompt": "2 + 3 =", "logprobs": 1}),
    ],
)
def test_streams_and_completions_are_what_vllm_would_have_sent(
    ingest_stack, vllm_server, path, extra
) -> None:
    request = {
        "model": vllm_server.model_name,
        "max_tokens": 6,
        "seed": 7,
        "temperature": 1.0,
    } | extra
    direct = httpx.post(f"{vllm_server.openai_base_url}/{path}", json=request, timeout=60)
    proxied = httpx.post(f"{ingest_stack.base_url}/{path}", json=request, timeout=60)
    if extra.get("stream"):
        assert _stream(proxied) == _stream(direct), (
            "ingest must strip exactly what it added for capture"
        )
    else:
        direct_body, proxied_body = direct.json(), proxied.json()
        for body in (direct_body, proxied_body):
            body.pop("id"), body.pop("created")
        # Asked for logprobs: the agent gets them, in vLLM's own format; token ids stay stripped.
        assert (
            proxied_body == direct_body and proxied_body["choices"][0]["logprobs"]["token_logprobs"]
        )


def test_curl_and_langchain_work_unchanged(ingest_stack, vllm_server) -> None:
    from langchain_openai import ChatOpenAI

    body = json.dumps({"model": vllm_server.model_name, "messages": MESSAGES, "max_tokens": 4})
    curl = subprocess.run(
        ["curl", "-s", "-H", "Content-Type: application/json", "-d", body,
         f"{ingest_stack.session_url('curl-1')}/chat/completions"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(curl.stdout)["choices"][0]["message"]["role"] == "assistant"
    chat = ChatOpenAI(base_url=ingest_stack.session_url("langchain-1"), api_key="unused",
                      model=vllm_server.model_name, max_tokens=4)  # fmt: skip
    chat.invoke("hello")
    assert "".join(chunk.text for chunk in chat.stream("hello again"))
    assert len(ingest_stack.calls("curl-1")) == 1 and len(ingest_stack.calls("langchain-1")) == 2


def test_sessions_come_from_url_header_or_metadata(ingest_stack, vllm_server) -> None:
    nested = encode(SessionRef("child-1", ("root-1",), "solver", {"task": "t7"}))
    request = {"model": vllm_server.model_name, "messages": MESSAGES, "max_tokens": 2}
    httpx.post(
        f"{ingest_stack.session_url(nested)}/chat/completions", json=request, timeout=60
    ).raise_for_status()
    httpx.post(f"{ingest_stack.base_url}/chat/completions", json=request, headers={"X-Parity-Session": "hdr-2"},
               timeout=60).raise_for_status()  # fmt: skip
    httpx.post(f"{ingest_stack.base_url}/chat/completions", timeout=60,
               json=request | {"metadata": {"parity_session": "meta-1", "user": "u9"}}).raise_for_status()  # fmt: skip
    httpx.post(
        f"{ingest_stack.base_url}/chat/completions", json=request, timeout=60
    ).raise_for_status()
    (child,) = ingest_stack.calls("child-1")
    assert (list(child.parent_session_ids), child.trajectory_name, dict(child.metadata)) == (
        ["root-1"],
        "solver",
        {"task": "t7"},
    )
    assert len(ingest_stack.calls("hdr-2")) == 1
    (meta,) = ingest_stack.calls("meta-1")
    assert dict(meta.metadata) == {"user": "u9"}
    assert len(ingest_stack.calls("unassigned")) >= 1


def test_stop_sequences_reach_vllm_and_are_recorded(ingest_stack, vllm_server) -> None:
    api = client(ingest_stack.session_url("stop-1"))
    greedy: dict[str, Any] = {"model": vllm_server.model_name, "messages": MESSAGES, "max_tokens": 16, "temperature": 0,
              "extra_body": {"return_token_ids": True}}  # fmt: skip
    free = api.chat.completions.create(**greedy).choices[0]
    free_ids, free_text = free.model_extra["token_ids"], free.message.content
    # A stop string from the second half of the unconstrained answer (a whole word, so no
    # half-decoded byte), and a stop token from it.
    words = [
        w
        for w in free_text[len(free_text) // 2 :].split()
        if "\ufffd" not in w and free_text.index(w) > 0
    ]
    assert words, f"no usable stop word in {free_text!r}"
    stop, stop_token = words[0], free_ids[3]

    by_string = api.chat.completions.create(**greedy, stop=[stop]).choices[0]
    streamed_ids: list[int] = []
    streamed_text = ""
    for chunk in api.chat.completions.create(**greedy, stop=[stop], stream=True):
        for choice in chunk.choices:
            streamed_ids += (choice.model_extra or {}).get("token_ids") or []
            streamed_text += choice.delta.content or ""
    stop_ids = {"return_token_ids": True, "stop_token_ids": [stop_token]}
    by_token = api.chat.completions.create(**greedy | {"extra_body": stop_ids}).choices[0]
    _, string_call, stream_call, token_call = ingest_stack.calls("stop-1")

    assert by_string.message.content == streamed_text == free_text[: free_text.index(stop)]
    assert (by_string.finish_reason, by_string.model_extra["stop_reason"]) == ("stop", stop)
    for call in (string_call, stream_call):
        (recorded,) = call.choices
        assert ids(recorded.token_ids) == by_string.model_extra["token_ids"] == streamed_ids
        assert free_ids[: len(streamed_ids)] == streamed_ids, (
            "greedy decoding stops on the same tokens"
        )
        assert (recorded.finish_reason, recorded.stop_reason, recorded.text) == (
            "stop",
            stop,
            streamed_text,
        )
    assert stream_call.streamed and json.loads(string_call.request_json)["stop"] == [stop]
    (recorded,) = token_call.choices
    assert (
        ids(recorded.token_ids)
        == by_token.model_extra["token_ids"]
        == free_ids[: free_ids.index(stop_token) + 1]
    )
    assert (recorded.finish_reason, recorded.stop_reason) == (
        "stop",
        str(by_token.model_extra["stop_reason"]),
    )
    assert by_token.model_extra["stop_reason"] == stop_token


def test_response_format_reaches_vllm_and_the_constrained_tokens_are_recorded(
    ingest_stack, vllm_server
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
              "additionalProperties": False}  # fmt: skip
    response_format: ResponseFormatJSONSchema = {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema},
    }
    api = client(ingest_stack.session_url("format-1"))
    greedy: dict[str, Any] = {"model": vllm_server.model_name, "messages": MESSAGES, "max_tokens": 24, "temperature": 0,
              "extra_body": {"return_token_ids": True}}  # fmt: skip
    free = api.chat.completions.create(**greedy).choices[0]
    constrained = api.chat.completions.create(**greedy, response_format=response_format).choices[0]
    _, call = ingest_stack.calls("format-1")
    # Whitespace may come between JSON tokens but nowhere else: the schema forces this opening.
    opening, compact = '{"answer"', "".join(constrained.message.content.split())
    assert compact and opening.startswith(compact[: len(opening)]), constrained.message.content
    assert not "".join(free.message.content.split()).startswith("{"), (
        "the unconstrained answer must differ"
    )
    (recorded,) = call.choices
    assert ids(recorded.token_ids) == constrained.model_extra["token_ids"]
    assert recorded.text == constrained.message.content
    assert json.loads(call.request_json)["response_format"] == response_format

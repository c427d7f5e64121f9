"""A chat answer's tool calls as the items the agent declared the tools as, whole and streamed, and the request's
text settings echoed as vLLM echoes them."""

from __future__ import annotations

import json
from typing import Any

from parity.services.ingest.endpoints.openai_responses import answers
from parity.services.ingest.endpoints.openai_responses.tool_catalog import (
    encode_custom_input,
    tool_catalog,
)
from tests.unit.ingest.endpoints.openai_responses.test_tool_catalog import codex_request

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi \u00e9\n*** End Patch\n"


def shell(request: dict[str, Any]) -> answers.ResponseShell:
    return answers.ResponseShell("resp_x", "gpt-5.5", request, 100, tool_catalog(request))


def chat_answer(*calls: tuple[str, str]) -> dict[str, Any]:
    tool_calls = [{"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": arguments}}
                  for index, (name, arguments) in enumerate(calls)]  # fmt: skip
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    return {"choices": [{"message": message, "finish_reason": "tool_calls"}], "usage": None}


def test_calls_come_back_as_custom_tool_calls_and_namespaced_function_calls() -> None:
    request = codex_request("gpt-6.2-sol")
    request["input"][0]["tools"].append(
        codex_request("gpt-5.5")["tools"][3]
    )  # apply_patch, outside a namespace
    response = answers.to_response(
        shell(request),
        chat_answer(("apply_patch", encode_custom_input(PATCH)),
                    ("functions__exec", encode_custom_input("text('hi')")),
                    ("clock__sleep", '{"duration_ms": 5}'), ("unknown", "{}")),
    )  # fmt: skip
    patch, code, sleep, unknown = response["output"]
    assert patch == {"call_id": "call_0", "input": PATCH, "name": "apply_patch", "type": "custom_tool_call",
                     "id": patch["id"], "async": None, "caller": None, "namespace": None}  # fmt: skip
    assert patch["id"].startswith("ctc_")
    assert (code["type"], code["name"], code["namespace"], code["input"]) == (
        "custom_tool_call",
        "exec",
        "functions",
        "text('hi')",
    )
    assert (sleep["type"], sleep["name"], sleep["namespace"], sleep["arguments"]) == (
        "function_call",
        "sleep",
        "clock",
        '{"duration_ms": 5}',
    )
    assert (unknown["name"], unknown["namespace"]) == ("unknown", None)


def events_of(stream: answers.ResponseStream, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    raw = b"".join(
        [*stream.start(), *(e for chunk in chunks for e in stream.feed(chunk)), *stream.finish()]
    )
    return [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]


def tool_chunk(index: int, arguments: str, name: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if name is not None:
        call |= {
            "id": f"call_{index}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
    return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}


def test_a_streamed_custom_call_streams_its_input_as_it_is_decoded() -> None:
    arguments = encode_custom_input(PATCH)
    pieces = [arguments[:3], arguments[3:12], arguments[12:30], arguments[30:]]
    chunks = [tool_chunk(0, "", "apply_patch"), *(tool_chunk(0, piece) for piece in pieces),
              tool_chunk(1, '{"cmd": "ls"}', "exec_command")]  # fmt: skip
    events = events_of(answers.ResponseStream(shell(codex_request("gpt-5.5"))), chunks)
    kinds = [event["type"] for event in events]
    assert (
        kinds[2] == "response.output_item.added" and events[2]["item"]["type"] == "custom_tool_call"
    )
    deltas = [
        event["delta"]
        for event in events
        if event["type"] == "response.custom_tool_call_input.delta"
    ]
    assert "".join(deltas) == PATCH and len(deltas) > 1
    done = next(
        event for event in events if event["type"] == "response.custom_tool_call_input.done"
    )
    assert done["input"] == PATCH and "response.function_call_arguments.delta" in kinds
    completed = events[-1]["response"]
    assert [item["type"] for item in completed["output"]] == ["custom_tool_call", "function_call"]
    assert completed["output"][0]["input"] == PATCH
    # A function call's added item carries the fields vLLM's streamed item has, unset ones null.
    added = [event["item"] for event in events if event["type"] == "response.output_item.added"]
    assert added[1] | {"id": None} == {"arguments": "", "call_id": "call_1", "name": "exec_command",
                                       "type": "function_call", "id": None, "async": None, "caller": None,
                                       "namespace": None, "status": "in_progress", "created_by": None}  # fmt: skip
    assert [event["sequence_number"] for event in events] == list(range(len(events)))


def test_text_settings_are_echoed_with_every_field_of_their_format() -> None:
    schema = {"type": "json_schema", "name": "out", "schema": {"type": "object"}}
    echoed = {
        "json schema": ({"format": schema}, {"format": schema | {"description": None, "strict": None}, "verbosity": None}),
        "described": ({"format": schema | {"description": "d"}},
                      {"format": schema | {"description": "d", "strict": None}, "verbosity": None}),
        "json object": ({"format": {"type": "json_object"}}, {"format": {"type": "json_object"}, "verbosity": None}),
        "verbosity": ({"verbosity": "low"}, {"format": None, "verbosity": "low"}),
        "none": (None, None),
    }  # fmt: skip
    for name, (text, expected) in echoed.items():
        assert answers.echoed_text(text) == expected, name

"""Ingest's /v1/responses and /v1/messages answers against vLLM's own endpoints for the same request, field for
field, whole and streamed: an agent pinned to vLLM's shape sees vLLM's shape. Only what differs per answer by
nature (ids, creation times) is left out; at temperature 0, or seeded, everything else is the same, numbers spelled
alike."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]

# Values that differ between any two answers, whoever serves them. Cached tokens are compared: each case warms
# vLLM's prefix cache with its prompt first, so both answers find the same blocks there.
PER_ANSWER = {"id", "created_at", "item_id", "call_id", "response_id"}
CALCULATOR = {"name": "calculator", "description": "Add two integers.",
              "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                               "required": ["a", "b"]}}  # fmt: skip
FUNCTION = {"type": "function", "name": CALCULATOR["name"], "description": CALCULATOR["description"],
            "parameters": CALCULATOR["input_schema"]}  # fmt: skip
# Codex CLI's kinds of tool that vLLM serves: a free-form custom tool, and functions in a namespace.
CUSTOM = {"type": "custom", "name": "calculator", "description": "Add two integers, as free text."}
MATH = {"type": "namespace", "name": "math", "description": "Arithmetic.", "tools": [FUNCTION]}
SUM_FORMAT = {"type": "json_schema", "name": "sum", "description": "The sum.",
              "schema": {"type": "object", "properties": {"sum": {"type": "integer"}}}}  # fmt: skip


def differences(ours: Any, theirs: Any, where: str = "") -> list[str]:
    """Every path where the two JSON values differ, leaving out per-answer values."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        found = [
            f"{where}.{key}: only vLLM has it ({theirs[key]!r})"
            for key in theirs.keys() - ours.keys()
        ]
        found += [
            f"{where}.{key}: only ingest has it ({ours[key]!r})"
            for key in ours.keys() - theirs.keys()
        ]
        for key in ours.keys() & theirs.keys():
            if key not in PER_ANSWER:
                found += differences(ours[key], theirs[key], f"{where}.{key}")
        return found
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [found for index, (a, b) in enumerate(zip(ours, theirs, strict=True))
                for found in differences(a, b, f"{where}[{index}]")]  # fmt: skip
    # By JSON spelling, not only by value: a client that reads 0 where vLLM sends 0.0 sees an int.
    return (
        []
        if ours == theirs and type(ours) is type(theirs)
        else [f"{where}: ingest {ours!r}, vLLM {theirs!r}"]
    )


def answer(url: str, path: str, request: dict) -> Any:
    if not request.get("stream"):
        response = httpx.post(
            f"{url}{path}", json=request, headers={"x-api-key": "any"}, timeout=120
        )
        assert response.status_code == 200, response.text
        return response.json()
    with httpx.stream(
        "POST", f"{url}{path}", json=request, headers={"x-api-key": "any"}, timeout=120
    ) as response:
        assert response.status_code == 200, response.read()
        return merged(
            [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
        )


def merged(events: list[dict]) -> list[dict]:
    """A stream with each run of deltas of one kind joined into one event: vLLM sends as many tokens per event as
    its engine step produced, which varies run to run."""
    joined: list[dict] = []
    for event in events:
        previous = joined[-1] if joined else None
        if (
            previous is not None
            and event["type"].endswith("delta")
            and previous["type"] == event["type"]
        ):
            if isinstance(event.get("delta"), str):
                previous["delta"] += event["delta"]
            elif isinstance(
                event.get("delta"), dict
            ):  # Anthropic's: text, partial_json or thinking
                for name in ("text", "partial_json", "thinking"):
                    if name in event["delta"]:
                        previous["delta"][name] += event["delta"][name]
            continue
        joined.append(json.loads(json.dumps(event)))
    for index, event in enumerate(joined):
        # Sequence numbers count the unmerged events.
        if "sequence_number" in event:
            event["sequence_number"] = index
    return joined


CASES = {
    "responses": ("/v1/responses", lambda model: {"model": model, "input": "What is 2 + 3?", "temperature": 0,
                                                   "instructions": "Answer briefly.", "max_output_tokens": 12}),
    "responses seeded": ("/v1/responses", lambda model: {"model": model, "input": "Tell me a story.", "temperature": 1,
                                                          "top_p": 0.9, "seed": 3, "max_output_tokens": 16}),
    "responses with vllm sampling": ("/v1/responses", lambda model: {
        "model": model, "input": "Tell me a story.", "temperature": 1, "seed": 7, "top_k": 20, "min_p": 0.05,
        "repetition_penalty": 1.1, "presence_penalty": 0.2, "frequency_penalty": 0.5, "stop": ["\n\n"],
        "max_output_tokens": 16}),
    "responses with tools": ("/v1/responses", lambda model: {"model": model, "input": "Add 2 and 3.", "temperature": 0,
                                                              "tools": [FUNCTION], "max_output_tokens": 40}),
    "responses with a custom tool": ("/v1/responses", lambda model: {
        "model": model, "input": "Add 2 and 3.", "temperature": 0, "tools": [FUNCTION, CUSTOM | {"name": "adder"}],
        "tool_choice": {"type": "custom", "name": "adder"}, "max_output_tokens": 200}),
    "responses with namespaced tools": ("/v1/responses", lambda model: {
        "model": model, "input": "Add 2 and 3.", "temperature": 0, "tools": [MATH],
        "tool_choice": {"type": "function", "name": "calculator"}, "max_output_tokens": 200}),
    "responses with a json schema": ("/v1/responses", lambda model: {
        "model": model, "input": "Add 2 and 3.", "temperature": 0, "text": {"format": SUM_FORMAT}, "max_output_tokens": 16}),
    "responses with a json schema, undescribed": ("/v1/responses", lambda model: {
        "model": model, "input": "Add 2 and 3.", "temperature": 0, "max_output_tokens": 16,
        "text": {"format": {k: v for k, v in SUM_FORMAT.items() if k != "description"}, "verbosity": "low"}}),
    "messages": ("/v1/messages", lambda model: {"model": model, "max_tokens": 12, "temperature": 0,
                                                 "system": "You add numbers.",
                                                 "messages": [{"role": "user", "content": "What is 2 + 3?"}]}),
    "messages with tools": ("/v1/messages", lambda model: {"model": model, "max_tokens": 40, "temperature": 0,
                                                            "tools": [CALCULATOR],
                                                            "messages": [{"role": "user", "content": "Add 2 and 3."}]}),
}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("case", CASES)
def test_ingest_answers_with_every_field_vllm_answers_with(
    ingest_stack, vllm_server, case: str, stream: bool
) -> None:
    path, make = CASES[case]
    request = make(vllm_server.model_name) | ({"stream": True} if stream else {})
    answer(vllm_server.base_url, path, make(vllm_server.model_name))
    ours = answer(
        ingest_stack.session_url("fields-" + re.sub(r"[^a-z0-9]+", "-", case)).removesuffix("/v1"),
        path,
        request,
    )
    theirs = answer(vllm_server.base_url, path, request)
    found = differences(ours, theirs)
    assert not found, "\n".join(found)


def test_prefix_cache_hits_are_reported_as_vllm_reports_them(ingest_stack, vllm_server) -> None:
    """An agent that accounts for cost reads cached tokens: a repeated long prompt is mostly a cache hit."""
    words = " ".join(f"word{index}" for index in range(120))
    responses = {"model": vllm_server.model_name, "input": f"Repeat nothing of this: {words}", "max_output_tokens": 4,
                 "temperature": 0}  # fmt: skip
    messages = {"model": vllm_server.model_name, "max_tokens": 4, "temperature": 0,
                "messages": [{"role": "user", "content": f"Repeat nothing of this: {words}"}]}  # fmt: skip
    ingest = ingest_stack.session_url("fields-cache").removesuffix("/v1")
    for path, request in (("/v1/responses", responses), ("/v1/messages", messages)):
        answer(ingest, path, request)
        ours, theirs = (
            answer(ingest, path, request)["usage"],
            answer(vllm_server.base_url, path, request)["usage"],
        )
        assert ours == theirs, path
    assert ours["cache_read_input_tokens"] > 0
    cached = answer(ingest, "/v1/responses", responses)["usage"]["input_tokens_details"][
        "cached_tokens"
    ]
    assert cached >= 128

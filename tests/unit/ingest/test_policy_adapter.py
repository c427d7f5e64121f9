"""Requests for the policy's model go to the adapter that serves it; anything else goes where it names.
The agent's answer names the model it asked for, never the adapter."""

from typing import Any

import pytest

from parity.core.session_slug import SessionRef
from parity.services.ingest.capture.recorder import CHAT, CaptureRequest
from parity.services.ingest.upstream.policy_adapter import PolicyAdapter
from parity.services.runtime.errors import InvalidArgument


def test_requests_for_the_policy_model_go_to_its_adapter_and_others_are_left_alone() -> None:
    adapter = PolicyAdapter()
    body = {"model": "tiny"}
    assert adapter.route(body) == "" and body["model"] == "tiny"
    adapter.set("tiny", "tiny-lora")
    assert adapter.route(body) == "tiny-lora" and body["model"] == "tiny-lora"
    other = {"model": "gpt-4o"}
    assert adapter.route(other) == "" and other["model"] == "gpt-4o"
    # A version set without an adapter sends the policy's requests to the model again.
    adapter.set("", "")
    body = {"model": "tiny"}
    assert adapter.route(body) == "" and body["model"] == "tiny"


@pytest.mark.parametrize(("model", "lora_adapter"), [("", "tiny-lora"), ("tiny", "tiny")])
def test_an_adapter_needs_the_model_it_serves(model, lora_adapter) -> None:
    adapter = PolicyAdapter()
    with pytest.raises(InvalidArgument):
        adapter.set(model, lora_adapter)


def test_the_answer_names_the_model_the_agent_asked_for_not_the_adapter() -> None:
    adapter = PolicyAdapter()
    adapter.set("tiny", "tiny-lora")
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    request = CaptureRequest.prepare(CHAT, body, b"", SessionRef("s"), {})
    request.lora_adapter = adapter.route(body)
    request.routed_model = "tiny"
    answer: dict[str, Any] = {
        "model": "tiny-lora",
        "choices": [{"index": 0, "token_ids": [5], "logprobs": {"content": []}}],
    }
    chunk = {"model": "tiny-lora", "choices": [{"index": 0, "delta": {"content": " a"}}]}
    for response in (answer, chunk):
        request.strip(response)
        assert response["model"] == "tiny"
    assert answer["choices"][0]["token_ids"] is None and answer["choices"][0]["logprobs"] is None
    # Without an adapter the upstream's name is left as it is.
    plain = CaptureRequest.prepare(
        CHAT, {"model": "tiny", "messages": []}, b"", SessionRef("s"), {}
    )
    answer = {"model": "tiny", "choices": []}
    plain.strip(answer)
    assert answer["model"] == "tiny"

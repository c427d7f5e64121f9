"""Multi-turn sessions over /v1/messages and /v1/responses prefix-merge in the assembler as chat sessions do:
agents run by the engine with the official SDKs at the session's base URLs, their turns one token-exact sample."""

from __future__ import annotations

from typing import Any

import anthropic
import numpy as np
import openai
import pytest
from anthropic.types import MessageParam

import parity
from parity import engine
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.common.v1 import llm_call_pb2
from parity.clients import AssemblerClient

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]

PROMPTS = [
    "What is 2 + 3?",
    "Name a color.",
    "Count to three.",
    "Say yes or no.",
    "Add four and five.",
]
# A random model's reply re-renders to other ids than the sampled ones now and then, which splits a session
# (token-exact, counted); temperature 0 makes which ones do the same on every run.
SAMPLING: dict[str, Any] = {"temperature": 0}


def ids(packed: bytes) -> list[int]:
    return np.frombuffer(packed, dtype="<i4").tolist()


def anthropic_agent(model: str):
    def agent(task: dict) -> float:
        client = anthropic.Anthropic(
            base_url=parity.session_url(api="anthropic"), api_key="any-key", max_retries=0
        )
        messages: list[MessageParam] = [{"role": "user", "content": task["prompt"]}]
        first = client.messages.create(
            model=model, max_tokens=4, messages=messages, extra_body=SAMPLING
        )
        messages += [
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": "And again?"},
        ]
        client.messages.create(model=model, max_tokens=4, messages=messages, extra_body=SAMPLING)
        return 1.0

    return agent


def responses_agent(model: str):
    def agent(task: dict) -> float:
        client = openai.OpenAI(base_url=parity.session_url(), api_key="any-key", max_retries=0)
        first = client.responses.create(
            model=model, max_output_tokens=4, input=task["prompt"], **SAMPLING
        )
        client.responses.create(model=model, max_output_tokens=4, input="And again?", previous_response_id=first.id,
                                **SAMPLING)  # fmt: skip
        return 1.0

    return agent


@pytest.mark.parametrize(("protocol", "make_agent", "endpoint"), [
    ("messages", anthropic_agent, llm_call_pb2.CALL_ENDPOINT_ANTHROPIC_MESSAGES),
    ("responses", responses_agent, llm_call_pb2.CALL_ENDPOINT_RESPONSES),
])  # fmt: skip
def test_two_turn_sessions_merge_into_one_token_exact_sample(
    full_stack, vllm_server, protocol, make_agent, endpoint
) -> None:
    tasks = [{"id": f"{protocol}-{n}", "prompt": prompt} for n, prompt in enumerate(PROMPTS)]
    results = engine.run(make_agent(vllm_server.model_name), tasks, rollouts_per_task=1, retries=0, progress=False,
                         run_id=f"merge-{protocol}")  # fmt: skip
    assert [r.outcome for r in results] == ["succeeded"] * len(tasks), [r.error for r in results]

    assembler = AssemblerClient(full_stack.assembler.address)
    merged = 0
    for result in results:
        request = assembler_pb.GetTrajectoryRequest(
            session_id=result.session_id, view=assembler_pb.TRAJECTORY_VIEW_FULL
        )
        trajectory = assembler.get_trajectory(request).trajectory
        calls = full_stack.calls(result.session_id)
        assert [call.endpoint for call in calls] == [endpoint, endpoint]
        assert len(trajectory.steps) == 2 and len(trajectory.samples) == 1 + trajectory.split_count
        assert trajectory.merged_call_count + trajectory.split_count == 1
        assert sum(trajectory.split_reasons.values()) == trajectory.split_count
        assert trajectory.token_count == sum(len(sample.loss_mask) for sample in trajectory.samples)
        if trajectory.split_count:
            # The second sample repeats what it shares with the first.
            assert trajectory.unique_token_count < trajectory.token_count
            continue
        assert trajectory.unique_token_count == trajectory.token_count
        # One sequence: the second prompt extends the first call's prompt and reply, token for token, and only
        # the sampled tokens are trained on, with the logprobs they were sampled with.
        merged += 1
        [sample] = trajectory.samples
        first, second = calls
        tokens = ids(sample.token_ids)
        assert tokens == ids(second.prompt_token_ids) + ids(second.choices[0].token_ids)
        assert tokens[: len(ids(first.prompt_token_ids))] == ids(first.prompt_token_ids)
        sampled_first = ids(first.choices[0].token_ids)
        start = len(ids(first.prompt_token_ids))
        assert tokens[start : start + len(sampled_first)] == sampled_first
        mask = np.frombuffer(sample.loss_mask, dtype=np.uint8)
        assert int(mask.sum()) == len(sampled_first) + len(ids(second.choices[0].token_ids))
        assert list(sample.call_ids) == [first.call_id, second.call_id]
    assert merged, "every session split: no prefix merge happened"

"""Against a real vLLM serving the small model: the retokenization report, and an LLM
judge reached through LiteLLM's OpenAI-compatible provider."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import grpc
import pytest
from openai import OpenAI

from parity import tokens
from parity.api.assembler.v1 import assembler_service_pb2 as pb
from parity.api.assembler.v1 import trajectory_pb2
from parity.api.common.v1 import llm_call_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.store.v1 import store_service_pb2_grpc as store_grpc
from parity.services.inference.vllm_launcher import VllmServer
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def judge_rewards(trajectory: trajectory_pb2.Trajectory) -> list:
    return [r for r in trajectory.rewards if r.source.startswith("judge:openai/")]


def captured_chat(client: OpenAI, server: VllmServer, session_id: str, turns: int, seed: int) -> list[llm_call_pb2.LlmCall]:
    """A multi-turn chat, captured the way ingest captures it: exact ids and logprobs."""
    messages = [{"role": "user", "content": f"Count to {seed + 3} and explain."}]
    calls = []
    for turn in range(turns):
        request = {"model": server.model_name, "messages": list(messages), "max_tokens": 24, "temperature": 1.0}
        completion = client.chat.completions.create(
            **request, logprobs=True, seed=seed * 100 + turn, extra_body={"return_token_ids": True}
        )
        choice = completion.choices[0]
        call = llm_call_pb2.LlmCall(
            call_id=f"{session_id}-{turn}", session_id=session_id, model=server.model_name, policy_version=1,
            request_json=json.dumps(request).encode(), prompt_token_ids=tokens.pack_token_ids(completion.prompt_token_ids),
            outcome=llm_call_pb2.CALL_OUTCOME_SUCCEEDED,
        )  # fmt: skip
        call.choices.add(
            index=0, token_ids=tokens.pack_token_ids(choice.token_ids), text=choice.message.content or "",
            logprobs=tokens.pack_floats([entry.logprob for entry in choice.logprobs.content]),
            finish_reason=choice.finish_reason,
        )  # fmt: skip
        calls.append(call)
        messages += [{"role": "assistant", "content": choice.message.content or ""},
                     {"role": "user", "content": "Go on."}]  # fmt: skip
    return calls


@pytest.fixture(scope="module")
def client(vllm_server: VllmServer) -> OpenAI:
    return OpenAI(base_url=vllm_server.openai_base_url, api_key="unused")


def test_the_retokenization_report_counts_samples_a_text_trainer_would_get_wrong(
    start_service, client, vllm_server, tiny_model_dir
) -> None:
    store = start_service("store", "--url", "memory://")
    with grpc.insecure_channel(store.address) as channel:
        stub = store_grpc.TokenStoreServiceStub(channel)
        for s in range(4):
            stub.WriteCalls(store_pb.WriteCallsRequest(calls=captured_chat(client, vllm_server, f"chat-{s}", 3, s)))
    report = subprocess.run(
        [sys.executable, "-m", "parity.services.assembler.retokenization_report", "--store", store.address,
         "--tokenizer", str(tiny_model_dir)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    differing, total = map(int, re.search(r"samples that would differ: +(\d+) of (\d+)", report.stdout).groups())
    # Chats re-render the assistant's text into the next prompt, so turns can split: 4 or more samples.
    assert total >= 4 and 0 <= differing <= total, report.stdout
    assert "completions that would differ:" in report.stdout


def test_an_llm_judge_over_litellm_scores_rollouts(start_stack, client, vllm_server, monkeypatch) -> None:
    monkeypatch.setenv("PARITY_TEST_JUDGE_KEY", "unused")
    stack = start_stack(
        "--judge-model", f"openai/{vllm_server.model_name}", "--judge-api-base", vllm_server.openai_base_url,
        "--judge-api-key-env", "PARITY_TEST_JUDGE_KEY", "--no-drop-zero-variance-groups",
        "--judge-extra-body", json.dumps({"structured_outputs": {"choice": ["0", "1"]}}),
    )  # fmt: skip
    stack.write(captured_chat(client, vllm_server, "judged", 2, 7))
    stack.close("judged")

    def judged_or_filtered() -> trajectory_pb2.Trajectory | None:
        trajectory = stack.stub.GetTrajectory(pb.GetTrajectoryRequest(session_id="judged")).trajectory
        return trajectory if judge_rewards(trajectory) or trajectory.filter_reason else None

    trajectory = eventually(judged_or_filtered, timeout_s=60, interval_s=0.5, what="the judge scoring or failing")
    judged = judge_rewards(trajectory)
    assert trajectory.filter_reason == "", trajectory.filter_reason
    assert judged[0].value in (0.0, 1.0) and trajectory.has_reward

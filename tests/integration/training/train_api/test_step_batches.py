"""What a step trains on: the groups that vary when too few do (and nothing more once every rollout earns the top
reward), sessions cut at a call cap, and a teacher's scores alone where rewards never vary."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

import parity
from parity.api.common.v1 import llm_call_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import StoreClient, TrainerClient
from parity.core.tokens import unpack_floats
from parity.training import batch_supply
from tests.integration.openai_api import sampled_logprobs
from tests.integration.training.train_api.agents import (
    TASKS,
    constant_agent,
    two_turn_agent,
    word_start_share,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


def test_a_step_short_of_varying_groups_trains_on_what_it_has_and_a_run_at_its_top_reward_completes_early(
    deployed_stack, tmp_path, monkeypatch
) -> None:  # fmt: skip
    monkeypatch.setattr(batch_supply, "TOP_UP_IDLE_S", 0.2)
    rollouts: Counter[str] = Counter()
    varying: list[str] = []

    async def mostly_solved_agent(task: dict[str, Any]) -> float:
        """Every rollout earns 1, but for the first two of the first task that finishes: 1 and 0."""
        await two_turn_agent(task)
        varying[:] = varying or [task["id"]]
        rollouts[task["id"]] += 1
        return (
            float(rollouts[task["id"]] % 2)
            if task["id"] == varying[0] and rollouts[task["id"]] <= 2
            else 1.0
        )

    result = parity.train(
        mostly_solved_agent, TASKS, model=deployed_stack.vllm.config.model_path, stack=deployed_stack.addresses,
        steps=3, groups_per_batch=2, rollouts_per_task=2, max_tokens=4, output_dir=str(tmp_path / "runs"),
        progress=False,
    )  # fmt: skip
    assert result.state == "completed", result.error
    assert result.steps == 1 and result.short_steps == 1, (
        "step 1 trained on the one group that varied"
    )
    assert (
        "every rollout of step 2's 18 tasks earned the run's top reward (1)" in result.stopped_early
    )
    assert result.exported_model and result.checkpoint.startswith(result.run_id)


async def six_turn_agent(task: dict[str, Any]) -> float:
    """Six turns unless ingest stops it; rewarded on the replies it got."""
    client = parity.get_async_chat_client()
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": task["prompt"]}]
    shares = []
    for _ in range(6):
        try:
            reply = await client.chat.completions.create(
                model=task["model"], messages=messages, max_tokens=task["max_tokens"],
                temperature=task["temperature"], logprobs=True,
            )  # fmt: skip
        except openai.BadRequestError as error:
            assert error.type == "session_budget_exceeded", error
            break
        shares.append(
            word_start_share([entry.token for entry in sampled_logprobs(reply.choices[0])])
        )
        messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                     {"role": "user", "content": "Say more."}]  # fmt: skip
    return sum(shares) / len(shares)


def test_a_run_with_a_three_call_cap_stops_every_six_turn_session_at_call_four_and_counts_it(
    deployed_stack, tmp_path
) -> None:
    result = parity.train(
        six_turn_agent, TASKS, model=deployed_stack.vllm.config.model_path, stack=deployed_stack.addresses, steps=1,
        groups_per_batch=2, rollouts_per_task=2, max_tokens=6, session_max_calls=3, capped_episodes="keep_reward",
        output_dir=str(tmp_path / "runs"), progress=False,
    )  # fmt: skip
    assert result.state == "completed", result.error
    assert result.capped_episodes >= 4, (
        "every episode of the step's batch was cut at the cap, and trained on"
    )
    store = StoreClient(deployed_stack.store.address)
    request = store_pb.ListSessionsRequest(page_size=1000, metadata={"parity.run_id": result.run_id},
                                           outcome=session_pb2.SESSION_OUTCOME_SUCCEEDED)  # fmt: skip
    ours = [s.session_id for s in store.list_sessions(request).sessions]
    assert len(ours) >= 4
    for session_id in ours:
        calls = store.list_calls(store_pb.ListCallsRequest(session_id=session_id)).calls
        assert [c.outcome for c in calls] == [llm_call_pb2.CALL_OUTCOME_SUCCEEDED] * 3 + [
            llm_call_pb2.CALL_OUTCOME_SESSION_CAPPED
        ]
        assert calls[-1].session_cap == "calls"


def test_a_distillation_run_trains_on_its_teachers_scores_alone_where_rewards_never_vary(
    deployed_stack, tmp_path
) -> None:
    result = parity.train(
        constant_agent, TASKS, model=deployed_stack.vllm.config.model_path, stack=deployed_stack.addresses, steps=2,
        groups_per_batch=1, rollouts_per_task=2, max_tokens=4, output_dir=str(tmp_path / "runs"), progress=False,
        teacher=deployed_stack.vllm.base_url, reward_coef=0.0, learning_rate=3e-3,
    )  # fmt: skip
    assert result.state == "completed" and result.steps == 2, result.error
    records = [
        json.loads(line)
        for line in (tmp_path / "runs" / result.run_id / "metrics.jsonl").read_text().splitlines()
    ]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2] and all(
        "teacher_kl" in r and r["teacher_seconds"] > 0 for r in train
    )
    trainer = TrainerClient(deployed_stack.trainer.address)
    for step in (1, 2):
        batch = trainer.get_step_batch(
            trainer_pb.GetStepBatchRequest(run_id=result.run_id, step=step)
        ).batch
        assert batch.samples, (
            "groups whose rewards never vary are kept: the teacher scores every token"
        )
        for sample in batch.samples:
            teacher, student = (
                unpack_floats(b) for b in (sample.teacher_logprobs, sample.student_logprobs)
            )
            # One score per sampled token, none for the prompt, the user's follow-up or the template.
            assert len(teacher) == len(student) == sample.loss_token_count > 0
            assert abs(sample.teacher_gap - float(np.mean(teacher - student))) < 1e-6
            # The teacher serves the weights that sampled the step's batch (the policy's own vLLM, updated after
            # each step): scoring the sampled ids again gives the logprobs vLLM sampled them with.
            assert np.max(np.abs(teacher - student)) < 1e-3
    assert all(abs(r["teacher_kl"]) < 1e-3 for r in train), (
        "a teacher that is the policy agrees with it"
    )

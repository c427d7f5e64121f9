"""`parity.train()` against a deployed stack: a two-turn agent of the test's own trains, validates and exports, and
every output of the run says so: its metrics, its trajectories, its lineage, the exported model."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers import AutoModelForCausalLM, AutoTokenizer, BatchEncoding

import parity
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.assembler.v1 import trajectory_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import AssemblerClient, StoreClient, TrainerClient
from tests.integration.training.train_api.agents import TASKS, two_turn_agent

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]

VAL_TASKS = [
    {"id": "v0", "prompt": "Describe a small box."},
    {"id": "v1", "prompt": "Tell me about the team."},
]


def test_a_two_turn_agent_trains_validates_and_exports_through_the_python_api(
    deployed_stack, tmp_path
) -> None:
    model = deployed_stack.vllm.config.model_path
    result = parity.train(
        two_turn_agent, TASKS, val_tasks=VAL_TASKS, model=model, stack=deployed_stack.addresses, steps=3,
        groups_per_batch=2, rollouts_per_task=4, max_tokens=8, learning_rate=3e-3, val_samples=2,
        output_dir=str(tmp_path / "runs"), progress=False, wandb="parity-tests", wandb_mode="offline",
    )  # fmt: skip
    assert result.state == "completed", result.error
    assert result.max_sync_logprob_diff is not None, "every step synced its weights"
    assert result.steps == 3 and result.max_sync_logprob_diff < 1e-4
    assert result.val_reward_before is not None and result.val_reward_after is not None
    run_dir = tmp_path / "runs" / result.run_id
    assert result.run_dir == str(run_dir) and result.plot.endswith("reward.png")

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in records] == [("validation", 0), ("train", 1), ("train", 2), ("train", 3),
                                                         ("validation", 3)]  # fmt: skip
    assert all("pass@1" in r and "pass@2" in r for r in records if r["kind"] == "validation")
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/reward_mean")] == [1, 2, 3]
    assert [e.step for e in events.Scalars("validation/reward")] == [0, 3]
    assert list(
        (run_dir / "wandb").glob(f"offline-run-*-{result.run_id}/run-{result.run_id}.wandb")
    )

    # Every rollout's two calls are one merged, token-exact sample; validation sessions were never trained on.
    assembler = AssemblerClient(deployed_stack.assembler.address)
    trained = assembler.list_trajectories(
        assembler_pb.ListTrajectoriesRequest(page_size=1000)
    ).trajectories
    ours = [t for t in trained if t.session_id.startswith(result.run_id)]
    validation = [t for t in ours if "-v0" in t.session_id]
    training = [t for t in ours if "-s0" in t.session_id]
    assert len(validation) == 2 * len(VAL_TASKS) * 2 and len(training) >= 3 * 2 * 4
    assert {t.state for t in validation} == {trajectory_pb2.TRAJECTORY_STATE_VALIDATION}
    # Both turns are in each trajectory; they train as one sequence unless re-rendering the reply's text gave
    # other ids than the sampled ones (a random model's replies often do), which splits it, counted.
    views = [assembler.get_trajectory(assembler_pb.GetTrajectoryRequest(
        session_id=t.session_id, view=assembler_pb.TRAJECTORY_VIEW_FULL)).trajectory for t in training]  # fmt: skip
    assert all(len(v.steps) == 2 and len(v.samples) == 1 + v.split_count for v in views)
    assert any(v.split_count == 0 for v in views)
    # The run's token accounting: every join of a two-turn rollout merged or split, each split with its reason.
    splits = sum(result.splits.values())
    assert result.merge_rate is not None and 0 < result.merge_rate <= 1
    assert result.tokens_unique <= result.tokens_trained and (
        result.tokens_unique < result.tokens_trained
    ) == (splits > 0)
    assert set(result.splits) <= {"reply_rerendered", "history_changed", "history_cut"}
    assert result.to_json()["token_repetition"] == round(
        result.tokens_trained / result.tokens_unique, 4
    )
    store = StoreClient(deployed_stack.store.address)
    session = store.get_session(
        store_pb.GetSessionRequest(session_id=validation[0].session_id)
    ).session
    assert session.metadata["parity.validation"] == "true"
    assert session.end_user_id in {"user-v0", "user-v1"}

    # Lineage: the trainer names the steps that trained on an end user's sessions, and only those.
    trainer = TrainerClient(deployed_stack.trainer.address)
    batches = [
        trainer.get_step_batch(trainer_pb.GetStepBatchRequest(run_id=result.run_id, step=s)).batch
        for s in (1, 2, 3)
    ]
    for user in ("user-t0", "user-t1", "user-v0"):
        expected = {
            b.step: sorted({x.session_id for x in b.samples if x.end_user_id == user})
            for b in batches
        }
        found = trainer.list_trained_sessions(
            trainer_pb.ListTrainedSessionsRequest(end_user_id=user)
        ).steps
        assert {s.step: list(s.session_ids) for s in found if s.run_id == result.run_id} == {
            step: ids for step, ids in expected.items() if ids
        }
    assert not [s for s in trainer.list_trained_sessions(
        trainer_pb.ListTrainedSessionsRequest(end_user_id="user-v0")).steps if s.run_id == result.run_id]  # fmt: skip
    assert all(x.end_user_id.startswith("user-t") for b in batches for x in b.samples)

    # The exported folder is the policy vLLM serves: the same logprobs, from transformers, on a chat.
    exported = result.exported_model
    tokenizer = AutoTokenizer.from_pretrained(exported)
    chat = [{"role": "user", "content": TASKS[0]["prompt"]}]
    encoded = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=True)
    assert isinstance(encoded, BatchEncoding)
    prompt = list(encoded["input_ids"])
    reply = httpx.post(f"{deployed_stack.vllm.base_url}/v1/completions", json={
        "model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 1.0, "return_token_ids": True,
    }, timeout=60).json()["choices"][0]  # fmt: skip
    sequence = prompt + reply["token_ids"]
    scored = httpx.post(f"{deployed_stack.vllm.base_url}/v1/completions", json={
        "model": "tiny", "prompt": sequence, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0,
    }, timeout=60).json()["choices"][0]["prompt_logprobs"]  # fmt: skip
    served = np.array(
        [
            entry[str(token)]["logprob"]
            for token, entry in zip(sequence[1:], scored[1:], strict=True)
        ]
    )
    with torch.no_grad():
        logits = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)(
            torch.tensor([sequence])
        ).logits[0, :-1]
    reference = (
        torch.log_softmax(logits, -1).gather(-1, torch.tensor(sequence[1:])[:, None])[:, 0].numpy()
    )
    assert np.max(np.abs(served - reference)) < 1e-4
    assert result.serve_command == f"parity vllm serve --model {exported}"

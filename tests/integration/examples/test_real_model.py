"""The main job's agent on the real default model (SmolLM2-135M-Instruct): a calculator tool over several
turns, captured token-exact, a few steps of training that raise its held-out accuracy, and a distillation from the
model those steps trained that raises the untrained model's. Only a real model shows this: the
generated test model neither follows the one-shot example nor learns at a real model's learning rate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BatchEncoding

import parity
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.common.v1 import sample_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import AssemblerClient, StoreClient, TrainerClient
from parity.core.tokens import pack_floats, pack_mask, pack_token_ids, unpack_token_ids
from parity.services.trainer.batch_tensors import to_training_batch
from parity.services.trainer.teacher import Teacher
from parity.training.config_file import load_file
from parity.training.result import TrainResult
from tests.conftest import REPO_ROOT
from tests.integration.stack_fixtures import TrainingStack, start_training_stack
from tests.integration.vllm_fixtures import serving_model
from tests.learning_bounds import Gain, assert_learned, paired_difference, run_rewards

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1200)]
CALCULATOR = REPO_ROOT / "examples" / "calculator"
IM_START, IM_END = 1, 2  # SmolLM2's ChatML tokens
# Both learning tests compare held-out accuracy before and after their run on the same 32 validation tasks
# (val_tasks.jsonl, VAL_SAMPLES rollouts each a side), one paired difference per task: a task's difficulty, which
# varies most with its wording, cancels. Each passes at z >= 3.37 (Student's t, 31 degrees of freedom), which a run
# that learns nothing reaches with probability 1e-3. RL measured 0.273 -> 0.812 (gain 0.539, SE 0.064, z 8.5) and
# 0.227 -> 0.781 (gain 0.555, SE 0.062, z 8.9). The reward of the run's own rollouts, step 1 against step 4 (about
# 0.3 -> 0.55 in demo runs, 80-130 rollouts a step, an SE near 0.07) would sit too close to the bound.
STEPS, VAL_SAMPLES = 4, 4
# One step of distill.toml took the untrained model's held-out pass@1 from 0.30 to 0.80 with a teacher at 0.83, and
# a second to 0.83 (docs/training.md). Here one step from this teacher (4 steps of RL, at 0.81) went only from 0.24
# to 0.53 (gain 0.289, SE 0.065, z 4.48: 1.1 standard errors above the bound). Two steps measured 0.211 -> 0.844
# (gain 0.633, SE 0.060, z 10.5).
DISTILL_STEPS = 2


@pytest.fixture(scope="module")
def real_model_stack(
    module_services, real_model_dir: Path, tmp_path_factory
) -> Iterator[TrainingStack]:
    """A deployment around a vLLM of its own serving the real model: training rewrites its weights."""
    with serving_model(real_model_dir, tmp_path_factory) as vllm:
        yield start_training_stack(module_services, vllm, tmp_path_factory.mktemp("real-stack"))


def config_file(name: str, stack: TrainingStack, output_dir: Path, **values: Any) -> dict[str, Any]:
    """An example's TOML file as parity.train's arguments, run on `stack` from the untrained model."""
    loaded, _ = load_file(CALCULATOR / name)
    return loaded | {"progress": False, "stack": stack.addresses, "model": str(stack.vllm.config.model_path),
                     "output_dir": str(output_dir)} | values  # fmt: skip


@pytest.fixture(scope="module")
def trained(real_model_stack, tmp_path_factory) -> TrainResult:
    """The main job's run, a few steps of it, validated before and after: the learning test reads its rollouts,
    distillation takes its model."""
    result = parity.train(**config_file("train.toml", real_model_stack, tmp_path_factory.mktemp("runs"), steps=STEPS,
                                        val_every=0, val_samples=VAL_SAMPLES))  # fmt: skip
    assert result.state == "completed", result.error
    return result


def test_the_calculator_agent_calls_its_tool_and_learns_on_the_real_model(
    real_model_stack, trained
) -> None:
    result = trained
    assert result.learning_rate == 1e-5, "the real model's own rate, with none set"
    assert result.max_sync_logprob_diff is not None and result.max_sync_logprob_diff < 1e-3

    store = StoreClient(real_model_stack.store.address)
    with_tool = 0
    listed = (
        AssemblerClient(real_model_stack.assembler.address)
        .list_trajectories(assembler_pb.ListTrajectoriesRequest(page_size=1000))
        .trajectories
    )
    assert_learned(held_out_gain(real_model_stack, result, "held-out accuracy, RL"))
    for session_id in {
        view.session_id for view in listed if view.session_id.startswith(f"{result.run_id}-s")
    }:
        calls = store.list_calls(
            store_pb.ListCallsRequest(session_id=session_id, view=store_pb.CALL_VIEW_FULL)
        ).calls
        turns = [json.loads(call.request_json)["messages"] for call in calls]
        if len(calls) >= 2 and turns[1][-1]["content"].startswith("Result: "):
            with_tool += 1
            # The model's own chat template, with SmolLM2's special tokens, rendered the calls' prompts.
            first, second = (unpack_token_ids(call.prompt_token_ids) for call in calls[:2])
            assert first[0] == IM_START and list(second[: len(first)]) == list(first)
            assert list(second).count(IM_END) == list(first).count(IM_END) + 2, (
                "the reply's turn, then the result's"
            )
    assert with_tool >= 8, "most rollouts call the calculator and get its result back"


def held_out_gain(stack: TrainingStack, result: TrainResult, what: str) -> Gain:
    """The run's held-out accuracy after training less before, paired per validation task."""
    rollouts = run_rewards(stack.assembler.address, result.run_id, "v")
    before: dict[str, list[float]] = {}
    after: dict[str, list[float]] = {}
    for rollout in rollouts:
        (before if rollout.step == 0 else after).setdefault(rollout.task, []).append(rollout.reward)
    assert {r.step for r in rollouts} == {0, result.steps}, (
        "validated before training and after it, only"
    )
    return paired_difference(before, after, what)


def test_a_teacher_scores_each_sampled_token_as_vllm_sampled_it_and_shares_the_students_tokenizer(
    real_model_stack, real_model_dir: Path
) -> None:  # fmt: skip
    vllm = real_model_stack.vllm
    teacher = Teacher(vllm.base_url)
    teacher.check(real_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(real_model_dir)
    chat = [{"role": "user", "content": "What is 12 times 7? Answer with the number."}]
    encoded = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=True)
    assert isinstance(encoded, BatchEncoding)
    prompt = list(encoded["input_ids"])
    reply = httpx.post(f"{vllm.base_url}/v1/completions", json={
        "model": vllm.model_name, "prompt": prompt, "max_tokens": 24, "temperature": 1.0, "seed": 7, "logprobs": 0,
        "return_token_ids": True, "return_tokens_as_token_ids": True,
    }, timeout=120).json()["choices"][0]  # fmt: skip
    sampled = reply["logprobs"]["token_logprobs"]
    ids = prompt + reply["token_ids"]
    mask = [0] * len(prompt) + [1] * len(reply["token_ids"])
    sample = sample_pb2.Sample(token_ids=pack_token_ids(ids), loss_mask=pack_mask(mask),
                               rollout_logprobs=pack_floats([0.0] * len(prompt) + sampled))  # fmt: skip
    (scores,) = teacher.score([sample])
    assert len(scores) == len(ids)
    # The same weights score the ids the model sampled with the logprobs it sampled them with.
    assert np.max(np.abs(scores[len(prompt) :] - np.array(sampled))) < 1e-3
    batch = to_training_batch([sample]).with_teacher([scores])
    assert batch.teacher_logprobs is not None
    assert torch.count_nonzero(batch.teacher_logprobs[0, : len(prompt) - 1]) == 0, (
        "prompt tokens get no signal"
    )


def test_distillation_from_the_trained_model_raises_the_untrained_models_held_out_accuracy(
    real_model_stack, trained, tmp_path_factory
) -> None:  # fmt: skip
    with serving_model(
        Path(trained.exported_model), tmp_path_factory, served_model_name="teacher"
    ) as teacher:
        result = parity.train(**config_file(
            "distill.toml", real_model_stack, tmp_path_factory.mktemp("distill"), teacher=teacher.base_url,
            steps=DISTILL_STEPS, val_every=0, val_samples=VAL_SAMPLES,
        ))  # fmt: skip
    assert result.state == "completed", result.error
    assert_learned(held_out_gain(real_model_stack, result, "held-out accuracy, distilled"))
    steps = (
        TrainerClient(real_model_stack.trainer.address)
        .list_run_metrics(trainer_pb.ListRunMetricsRequest(run_id=result.run_id))
        .metrics
    )
    assert [s.step for s in steps] == list(range(1, DISTILL_STEPS + 1))
    # The student starts apart from its teacher; once it samples as the teacher would, the KL may sit at about 0.
    assert steps[0].values["teacher_kl"] > 0, "the teacher scored the first step"
    assert all(s.values["teacher_seconds"] > 0 for s in steps), "the teacher scored every step"

"""The main job's agent on the real default model (SmolLM2-135M-Instruct): a calculator tool over several
turns, captured token-exact, a few steps of training that raise its reward, and a distillation from the model
those steps trained that raises the untrained model's held-out accuracy. Only a real model shows this: the
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
from transformers import AutoTokenizer

import parity
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.common.v1 import sample_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import AssemblerClient, StoreClient, TrainerClient
from parity.services.trainer.batch_tensors import to_training_batch
from parity.services.trainer.teacher import Teacher
from parity.tokens import pack_floats, pack_mask, pack_token_ids, unpack_token_ids
from parity.training.config_file import load_file
from parity.training.result import TrainResult
from tests.conftest import REPO_ROOT
from tests.integration.stack_fixtures import TrainingStack, start_training_stack
from tests.integration.vllm_fixtures import serving_model

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1200)]
CALCULATOR = REPO_ROOT / "examples" / "calculator"
IM_START, IM_END = 1, 2  # SmolLM2's ChatML tokens
# Untrained, about 0.3 of all rollouts are right; three updates take that to about 0.55 (demo runs), measured
# on 80-130 rollouts a step: a gain past 0.1 is 2 standard errors short of the expected one, 1.5 above none.
STEPS, MIN_GAIN = 4, 0.1
# One step of distill.toml took the untrained model's held-out pass@1 from 0.30 to 0.80 with a teacher at 0.83
# (docs/training.md); this teacher, 4 steps of RL, is at about 0.75. With 64 held-out rollouts on each side, a
# gain past 0.15 is about 3 standard errors short of the expected one.
DISTILL_STEPS, DISTILL_VAL_SAMPLES, MIN_DISTILL_GAIN = 1, 2, 0.15


@pytest.fixture(scope="module")
def real_model_stack(module_services, real_model_dir: Path, tmp_path_factory) -> Iterator[TrainingStack]:
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
    """The main job's run, a few steps of it: the learning test reads its rollouts, distillation takes its model."""
    result = parity.train(**config_file("train.toml", real_model_stack, tmp_path_factory.mktemp("runs"),
                                        steps=STEPS, val_tasks=None))  # fmt: skip
    assert result.state == "completed", result.error
    return result


def test_the_calculator_agent_calls_its_tool_and_learns_on_the_real_model(real_model_stack, trained) -> None:
    result = trained
    assert result.learning_rate == 1e-5, "the real model's own rate, with none set"
    assert result.max_sync_logprob_diff is not None and result.max_sync_logprob_diff < 1e-3

    store = StoreClient(real_model_stack.store.address)
    with_tool = 0
    listed = AssemblerClient(real_model_stack.assembler.address).list_trajectories(
        assembler_pb.ListTrajectoriesRequest(page_size=1000)
    ).trajectories
    # Every rollout of a step counts, not only the groups its batch kept: those are kept for rewards that vary,
    # so their mean sits near a half whatever the policy.
    rewards: dict[int, list[float]] = {}
    for view in listed:
        if view.session_id.startswith(f"{result.run_id}-s") and view.has_reward:
            rewards.setdefault(int(view.session_id.removeprefix(f"{result.run_id}-s")[:5]), []).append(view.reward)
    first, last = (float(np.mean(rewards[step])) for step in (1, STEPS))
    assert last - first > MIN_GAIN, {step: (len(r), round(float(np.mean(r)), 3)) for step, r in sorted(rewards.items())}
    for session_id in {view.session_id for view in listed if view.session_id.startswith(f"{result.run_id}-s")}:
        calls = store.list_calls(store_pb.ListCallsRequest(session_id=session_id, view=store_pb.CALL_VIEW_FULL)).calls
        turns = [json.loads(call.request_json)["messages"] for call in calls]
        if len(calls) >= 2 and turns[1][-1]["content"].startswith("Result: "):
            with_tool += 1
            # The model's own chat template, with SmolLM2's special tokens, rendered the calls' prompts.
            first, second = (unpack_token_ids(call.prompt_token_ids) for call in calls[:2])
            assert first[0] == IM_START and list(second[: len(first)]) == list(first)
            assert list(second).count(IM_END) == list(first).count(IM_END) + 2, "the reply's turn, then the result's"
    assert with_tool >= 8, "most rollouts call the calculator and get its result back"


def test_a_teacher_scores_each_sampled_token_as_vllm_sampled_it_and_shares_the_students_tokenizer(
    real_model_stack, real_model_dir: Path
) -> None:  # fmt: skip
    vllm = real_model_stack.vllm
    teacher = Teacher(vllm.base_url)
    teacher.check(real_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(real_model_dir)
    chat = [{"role": "user", "content": "What is 12 times 7? Answer with the number."}]
    prompt = list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=True)["input_ids"])
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
    assert np.max(np.abs(scores[len(prompt):] - np.array(sampled))) < 1e-3
    batch = to_training_batch([sample]).with_teacher([scores])
    assert torch.count_nonzero(batch.teacher_logprobs[0, : len(prompt) - 1]) == 0, "prompt tokens get no signal"


def test_distillation_from_the_trained_model_raises_the_untrained_models_held_out_accuracy(
    real_model_stack, trained, tmp_path_factory
) -> None:  # fmt: skip
    with serving_model(Path(trained.exported_model), tmp_path_factory, served_model_name="teacher") as teacher:
        result = parity.train(**config_file(
            "distill.toml", real_model_stack, tmp_path_factory.mktemp("distill"), teacher=teacher.base_url,
            steps=DISTILL_STEPS, val_every=0, val_samples=DISTILL_VAL_SAMPLES,
        ))  # fmt: skip
    assert result.state == "completed", result.error
    before, after = result.val_pass_before["pass@1"], result.val_pass_after["pass@1"]
    assert after - before > MIN_DISTILL_GAIN, (before, after)
    (step,) = TrainerClient(real_model_stack.trainer.address).list_run_metrics(
        trainer_pb.ListRunMetricsRequest(run_id=result.run_id)
    ).metrics
    assert step.values["teacher_kl"] > 0 and step.values["teacher_seconds"] > 0, "the teacher scored the step"

"""`parity.train()` against a deployed stack (every service its own process, real vLLM): a two-turn
agent of the test's own trains, validates, exports; a run that fails ends at once with its reason."""

from __future__ import annotations

import concurrent.futures
import json
from collections import Counter
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import torch
from openai.types.chat import ChatCompletionMessageParam
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers import AutoModelForCausalLM, AutoTokenizer, BatchEncoding

import parity
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.assembler.v1 import trajectory_pb2
from parity.api.common.v1 import llm_call_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import AssemblerClient, StoreClient, TrainerClient
from parity.core.tokens import unpack_floats
from parity.services.trainer import teacher
from parity.services.trainer.replicas import VllmReplica
from parity.training import StackAddresses, batch_supply
from parity.training.run_control import RunEnded
from tests.conftest import free_port
from tests.integration.openai_api import sampled_logprobs
from tests.integration.tcp_relay import TcpRelay
from tests.time_bounds import Stopwatch
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]

TASKS = [{"id": f"t{n}", "prompt": prompt} for n, prompt in enumerate(
    ["Tell me about your day.", "Describe the sea.", "What do you like?", "Say something kind."])]  # fmt: skip
VAL_TASKS = [
    {"id": "v0", "prompt": "Describe a small box."},
    {"id": "v1", "prompt": "Tell me about the team."},
]


def word_start_share(token_texts: list[str]) -> float:
    return sum(text.startswith(" ") for text in token_texts) / max(1, len(token_texts))


async def two_turn_agent(task: dict[str, Any]) -> float:
    """Asks, hears back, asks again in the same conversation; rewarded on both replies. Each task
    stands for an end user of a deployed agent, named the way any client can: a header."""
    client = parity.get_async_chat_client()
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": task["prompt"]}]
    shares = []
    for follow_up in ("Say more.", None):
        reply = await client.chat.completions.create(
            model=task["model"], messages=messages, max_tokens=task["max_tokens"], temperature=task["temperature"],
            logprobs=True, extra_headers={"X-Parity-User": f"user-{task['id']}"},
        )  # fmt: skip
        shares.append(
            word_start_share([entry.token for entry in sampled_logprobs(reply.choices[0])])
        )
        if follow_up:
            messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                         {"role": "user", "content": follow_up}]  # fmt: skip
    return sum(shares) / len(shares)


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


def test_a_run_whose_sync_fails_ends_at_once_with_the_reason_and_its_checkpoint(
    deployed_stack, module_services, tmp_path
) -> None:
    # A trainer whose replica is gone: its run's first weight sync cannot land.
    dead_replica = f"http://127.0.0.1:{free_port()}"
    trainer = module_services.start(
        "trainer", "--assembler-address", deployed_stack.assembler.address, "--replicas", dead_replica,
        "--work-dir", str(tmp_path / "trainer"), "--consumer-id", "failing-trainer",
    )  # fmt: skip
    stack = StackAddresses(
        deployed_stack.addresses.ingest_url, deployed_stack.assembler.address, trainer.address
    )
    with Stopwatch() as run:
        result = parity.train(
            two_turn_agent, TASKS, model=deployed_stack.vllm.config.model_path, stack=stack, steps=3,
            groups_per_batch=2, rollouts_per_task=2, max_tokens=8, output_dir=str(tmp_path / "runs"), progress=False,
        )  # fmt: skip
    # At once: on the refused connection, at its first sync (its checkpoint is step 0), not after the replica's
    # timeout; a hang is pytest-timeout's to stop.
    assert run.seconds < VllmReplica.timeout_s, run.seconds
    assert result.state == "failed"
    assert dead_replica in result.error and "resumable from checkpoint" in result.error
    assert result.checkpoint == f"{result.run_id}/step-000000"
    assert result.resume_command.startswith(f"parity train --resume {result.run_id}")


def test_an_agent_that_always_fails_ends_the_run_with_its_error(deployed_stack, tmp_path) -> None:
    async def broken_agent(task: dict[str, Any]) -> float:
        raise ValueError(f"no tool for {task['id']}")

    # It ends before its first step (a hang is pytest-timeout's to stop).
    result = parity.train(
        broken_agent, TASKS, model=deployed_stack.vllm.config.model_path, stack=deployed_stack.addresses, steps=3,
        groups_per_batch=2, rollouts_per_task=2, retries=0, output_dir=str(tmp_path / "runs"), progress=False,
    )  # fmt: skip
    assert result.state == "failed" and result.steps == 0
    assert (
        "the agent failed 4 rollouts in a row; the last: ValueError: no tool for t" in result.error
    )
    assert result.checkpoint == f"{result.run_id}/step-000000"


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


async def constant_agent(task: dict[str, Any]) -> float:
    await two_turn_agent(task)
    return 0.5


def test_rewards_that_never_vary_end_the_run_with_advice_instead_of_spinning(
    deployed_stack, tmp_path
) -> None:
    result = parity.train(
        constant_agent, TASKS, model=deployed_stack.vllm.config.model_path, stack=deployed_stack.addresses, steps=2,
        groups_per_batch=1, rollouts_per_task=2, max_tokens=4, output_dir=str(tmp_path / "runs"), progress=False,
    )  # fmt: skip
    assert result.state == "failed" and result.steps == 0
    assert (
        "no batch for step 1 after 8 extra tasks" in result.error
        and "zero_variance_group" in result.error
    )


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


def test_a_teacher_that_stops_answering_ends_the_run_promptly_with_the_reason(
    deployed_stack, tmp_path
) -> None:
    with TcpRelay(deployed_stack.vllm.config.port) as relay, parity.Trainer(
        constant_agent, TASKS, model=str(deployed_stack.vllm.config.model_path), stack=deployed_stack.addresses,
        steps=3, groups_per_batch=1, rollouts_per_task=2, max_tokens=4, output_dir=str(tmp_path / "runs"),
        progress=False, teacher=f"http://127.0.0.1:{relay.port}", reward_coef=0.0,
    ) as trainer:  # fmt: skip
        trainer.step()
        relay.cut()
        failed_to_score = f"teacher .* at http://127.0.0.1:{relay.port} failed to score"
        with Stopwatch() as step, pytest.raises(RunEnded, match=failed_to_score):
            trainer.step()
        # Promptly: on the refused connection, not after the teacher's timeout for an answer.
        assert step.seconds < teacher.TIMEOUT_S, step.seconds


def production_session(
    deployed_stack, user: str, tags: list[str], signals: dict[str, float]
) -> str:
    """One session of a deployed agent, attributed to `user`, through ingest; then its late feedback."""
    with parity.session(user=user, tags=tags) as session:
        client = openai.OpenAI(
            base_url=parity.session_url(f"http://127.0.0.1:{deployed_stack.http_port}"), api_key="-"
        )
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": f"Help {user}."}],
                                       max_tokens=4, temperature=1.0)  # fmt: skip
    for name, value in signals.items():
        answer = httpx.post(f"http://127.0.0.1:{deployed_stack.http_port}/sessions/{session.session_id}/feedback",
                            json={"value": value, "name": name, "feedback_id": f"{session.session_id}-{name}"}, timeout=30)  # fmt: skip
        assert answer.status_code == 200 and answer.json()["status"] == "stored", answer.text
    return session.session_id


def test_a_from_store_run_trains_on_production_sessions_by_their_feedback_and_never_on_a_deleted_users(
    deployed_stack, tmp_path
) -> None:  # fmt: skip
    rule = {"thumbs_up": 1.0, "resolved": 1.0, "thumbs_down": -1.0}
    expected: dict[str, float] = {}
    for user in ("u0", "u1", "u2"):
        expected[
            production_session(deployed_stack, user, ["prod"], {"thumbs_up": 1.0, "resolved": 1.0})
        ] = 2.0
        expected[production_session(deployed_stack, user, ["prod"], {"thumbs_down": 1.0})] = -1.0
    gone = [
        production_session(deployed_stack, "gone", ["prod"], {"thumbs_up": 1.0}) for _ in range(2)
    ]
    production_session(deployed_stack, "quiet", ["prod"], {})
    production_session(deployed_stack, "staging", ["staging"], {"thumbs_up": 1.0})
    # The end user asks for deletion before the run starts.
    assert parity.delete_user_data("gone", store_address=deployed_stack.store.address).sessions == 2

    result = parity.train(
        model=deployed_stack.vllm.config.model_path, stack=deployed_stack.addresses, from_store=True, steps=3,
        groups_per_batch=2, rollouts_per_task=3, store_tags="prod", store_idle_minutes=0.0,
        feedback_weights=",".join(f"{name}={weight}" for name, weight in rule.items()), learning_rate=3e-3,
        export=False, output_dir=str(tmp_path / "runs"), progress=False,
    )  # fmt: skip
    # Six sessions make step 1; step 2 finds none left, and the run ends there, completed.
    assert result.state == "completed" and result.steps == 1, result.error
    assert "no usable sessions for step 2" in result.stopped_early
    assert result.store_sessions == {"used": 6, "deleted": 0, "skipped_active": 0, "skipped_filtered_out": 0,
                                     "skipped_too_stale": 0, "skipped_awaiting_feedback": 0, "skipped_no_feedback": 1}  # fmt: skip
    trainer = TrainerClient(deployed_stack.trainer.address)
    batch = trainer.get_step_batch(
        trainer_pb.GetStepBatchRequest(run_id=result.run_id, step=1)
    ).batch
    # Every sample is a chosen session's, with the reward the rule gave its feedback; none is the deleted user's.
    assert {s.session_id: s.reward for s in batch.samples} == expected
    assert not {s.session_id for s in batch.samples} & set(gone)
    assert {s.end_user_id for s in batch.samples} == {"u0", "u1", "u2"}
    found = trainer.list_trained_sessions(
        trainer_pb.ListTrainedSessionsRequest(end_user_id="gone")
    ).steps
    assert not [s for s in found if s.run_id == result.run_id]
    # Adopted sessions are closed for the run, so another run never trains on them again.
    store = StoreClient(deployed_stack.store.address)
    adopted = store.get_session(store_pb.GetSessionRequest(session_id=next(iter(expected)))).session
    assert (
        adopted.state == session_pb2.SESSION_STATE_CLOSED
        and adopted.metadata["parity.run_id"] == result.run_id
    )

    # Nothing usable is left: the next run ends at once, before its first step, and says why (a run that waited
    # instead would hang: pytest-timeout's to stop).
    empty = parity.train(
        model=deployed_stack.vllm.config.model_path, stack=deployed_stack.addresses, from_store=True, steps=1,
        store_tags="prod", store_idle_minutes=0.0, export=False, output_dir=str(tmp_path / "runs"), progress=False,
    )  # fmt: skip
    assert empty.state == "failed" and empty.steps == 0
    assert "no usable sessions for step 1 (skipped: no_feedback: 1)" in empty.error

    # A continuous run waits for new sessions instead, and trains once enough have come.
    with parity.Trainer(
        model=str(deployed_stack.vllm.config.model_path), stack=deployed_stack.addresses, from_store=True, continuous=True,
        store_poll_s=0.5, steps=1, groups_per_batch=1, rollouts_per_task=2, store_tags="prod", store_idle_minutes=0.0,
        export=False, output_dir=str(tmp_path / "runs"), progress=False,
    ) as waiting, concurrent.futures.ThreadPoolExecutor(1) as pool:  # fmt: skip
        step = pool.submit(waiting.step)
        control = TrainerClient(deployed_stack.trainer.address)
        eventually(lambda: control.get_status(trainer_pb.GetStatusRequest()).run.state == run_pb2.RUN_STATE_WAITING_FOR_DATA,
                   what="the continuous run waiting for data")  # fmt: skip
        assert not step.done()
        arrived = {
            production_session(deployed_stack, "u3", ["prod"], {"thumbs_up": value}): value
            for value in (1.0, 0.0)
        }
        assert step.result(timeout=300).values["store_sessions_used"] == 2
        batch = control.get_step_batch(
            trainer_pb.GetStepBatchRequest(run_id=waiting.run_id, step=1)
        ).batch
        assert {s.session_id: s.reward for s in batch.samples} == arrived
        assert waiting.finish().state == "completed"

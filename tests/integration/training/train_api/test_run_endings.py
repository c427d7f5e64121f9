"""Runs that cannot go on end at once, with the reason and the checkpoint to resume from: a weight sync that cannot
land, an agent that always fails, rewards that never vary, a teacher that stops answering."""

from __future__ import annotations

from typing import Any

import pytest

import parity
from parity.services.trainer import teacher
from parity.services.trainer.replicas import VllmReplica
from parity.training import StackAddresses
from parity.training.run_control import RunEnded
from tests.conftest import free_port
from tests.integration.tcp_relay import TcpRelay
from tests.integration.training.train_api.agents import TASKS, constant_agent, two_turn_agent
from tests.time_bounds import Stopwatch

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


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

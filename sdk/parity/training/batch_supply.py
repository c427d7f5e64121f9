"""Rollouts that feed a step's batch: the step's tasks, and more when the assembler drops groups.

A batch can come up short when the assembler drops a group (all rewards equal, or every
rollout failed). Once rollouts are done and the batch is still short for TOP_UP_IDLE_S,
more tasks top it up, up to a limit. Past it the step trains on the groups that carry
signal (a short batch, counted), rather than ending a run that has something to learn.
With no such group the run ends: completed early when every rollout earned the run's top
reward (nothing is left to learn from these tasks), failed with advice otherwise. A whole
batch's worth of rollouts failing in a row ends the run too: no batch can form.
"""

from __future__ import annotations

import concurrent.futures
import secrets
import time
from collections.abc import Sequence
from typing import Any

import structlog

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import AssemblerClient
from parity.engine import RolloutResult
from parity.training.rollout_runner import RolloutRunner, Sampling
from parity.training.run_control import AgentFailing, RewardsSaturated
from parity.training.settings import TrainSettings
from parity.training.task_order import TaskOrder

log = structlog.get_logger(__name__)

TOP_UP_IDLE_S = 2.0
# Tasks a step may add to make up for dropped groups, per group it needs: past that, rewards that vary within
# groups are evidently rare (tasks too hard or too easy for the model, or a constant reward), and the step
# trains on the groups it has, or the run ends.
MAX_TOP_UPS_PER_GROUP = 8

Rollouts = concurrent.futures.Future[list[RolloutResult]]


class BatchSupply:
    def __init__(
        self, runner: RolloutRunner, assembler: AssemblerClient, tasks: TaskOrder, settings: TrainSettings,
        run_id: str, served_model: str,
    ) -> None:  # fmt: skip
        self.runner = runner
        self.assembler = assembler
        self.tasks = tasks
        self.settings = settings
        self.run_id = run_id
        self.served_model = served_model
        self._failures_in_a_row = 0
        self._last_failure = ""
        self._topped_up = 0
        self._passed_over_before = 0
        self._best_reward: float | None = None

    def begin(self, step: int) -> list[Rollouts]:
        """Roll out a batch's worth of tasks for `step`; the list collects what top-ups add."""
        self._topped_up = 0
        self._passed_over_before = self.tasks.passed_over
        return [self._roll_out(self.tasks.take(self.settings.groups_per_batch), step)]

    def top_up(
        self,
        futures: list[Rollouts],
        status: trainer_pb.GetStatusResponse,
        idle_since: float | None,
        step: int,
    ) -> float | None:
        """One more task when the trainer waits and nothing is pending or running; returns the idle clock."""
        waiting = status.run.state == run_pb2.RUN_STATE_WAITING_FOR_DATA
        running = any(not f.done() for f in futures)
        if self.settings.rollout_mode == "async":
            pending = self._pending_groups()
            if not running and pending < self.settings.groups_per_batch:
                futures.append(
                    self._roll_out(self.tasks.take(self.settings.groups_per_batch), step)
                )
            return None
        if not waiting or running:
            return None
        # Every rollout has closed, so every pending group is complete: it is short only of groups a filter dropped.
        missing = self.settings.groups_per_batch - self._pending_groups()
        if missing <= 0:
            return None
        now = time.monotonic()
        if idle_since is None:
            return now
        if now - idle_since >= TOP_UP_IDLE_S:
            if self._topped_up >= MAX_TOP_UPS_PER_GROUP * self.settings.groups_per_batch:
                self._train_on_what_has_signal(futures, missing, step)
                return None
            self._topped_up += missing
            futures.append(self._roll_out(self.tasks.take(missing), step))
            return None
        return idle_since

    def _train_on_what_has_signal(self, futures: list[Rollouts], missing: int, step: int) -> None:
        """The extra-task budget is spent: a short batch from the groups that vary, else the run's end."""
        if missing < self.settings.groups_per_batch:
            pending = self.assembler.release_batch(
                assembler_pb.ReleaseBatchRequest(run_id=self.run_id)
            ).pending_group_count
            if pending:
                log.info(
                    "short_batch_released",
                    step=step,
                    groups=pending,
                    wanted=self.settings.groups_per_batch,
                )
                return
        rewards = {
            r.reward for f in futures for r in rollout_results(f) if r.outcome == "succeeded"
        }
        (reward,) = rewards if len(rewards) == 1 else (None,)
        best = self._best_reward
        if reward is not None and step > 1 and best is not None and reward >= best:
            raise RewardsSaturated(
                "completed", f"every rollout of step {step}'s {self._topped_up + self.settings.groups_per_batch} "
                f"tasks earned the run's top reward ({reward:g}): nothing is left to learn from these tasks", step - 1,
            )  # fmt: skip
        raise AgentFailing("failed", self._no_batch_message(step, reward), step - 1)

    def raise_if_agent_failing(
        self, futures: Sequence[concurrent.futures.Future[Any]], step: int
    ) -> None:
        """A whole batch's worth of rollouts failed in a row: no batch can form, so say why and end."""
        limit = self.settings.groups_per_batch * self.settings.rollouts_per_task
        if self._failures_in_a_row >= limit:
            for future in futures:
                future.cancel()
            raise AgentFailing("failed", f"the agent failed {self._failures_in_a_row} rollouts in a row; "
                                         f"the last: {self._last_failure}", step - 1)  # fmt: skip

    def step_values(self) -> dict[str, float]:
        """What the supply adds to a step's metrics: the tasks it added for dropped groups, and those it passed
        over for want of signal."""
        return {"extra_tasks": float(self._topped_up),
                "tasks_passed_over": float(self.tasks.passed_over - self._passed_over_before)}  # fmt: skip

    def _roll_out(self, tasks: list[dict[str, Any]], step: int) -> Rollouts:
        # Settled by the trainer (model_choice) before the first batch: the named model's, else the default.
        assert self.settings.max_tokens is not None, "max_tokens is resolved before rollouts start"
        sampling = Sampling(self.served_model, self.settings.max_tokens, self.settings.temperature)
        prefix = f"{self.run_id}-s{step:05d}-{secrets.token_hex(2)}"
        future = self.runner.submit(tasks, prefix=prefix, rollouts_per_task=self.settings.rollouts_per_task,
                                    sampling=sampling)  # fmt: skip
        future.add_done_callback(self._count_failures)
        return future

    def _count_failures(self, future: Rollouts) -> None:
        results = rollout_results(future) if not future.cancelled() else []
        self.tasks.observe(results)
        for result in results:
            final = result.attempt == self.settings.retries or result.outcome == "succeeded"
            if result.outcome == "succeeded":
                self._failures_in_a_row = 0
                if result.reward is not None and (
                    self._best_reward is None or result.reward > self._best_reward
                ):
                    self._best_reward = result.reward
            elif final:
                self._failures_in_a_row += 1
                self._last_failure = result.error

    def _pending_groups(self) -> int:
        return self.assembler.get_stats(
            assembler_pb.GetStatsRequest(run_id=self.run_id)
        ).pending_group_count

    def _no_batch_message(self, step: int, reward: float | None) -> str:
        # This run's drops only: runs trained at once share the assembler.
        dropped = dict(
            self.assembler.get_stats(
                assembler_pb.GetStatsRequest(run_id=self.run_id)
            ).filtered_counts
        )
        every = f"; every rollout earned {reward:g}" if reward is not None else ""
        return (f"no batch for step {step} after {self._topped_up} extra tasks: the assembler dropped "
                f"their groups ({', '.join(f'{k}: {v}' for k, v in sorted(dropped.items())) or 'nothing counted'}{every}). "
                "Rewards must vary within a task's rollouts: give easier tasks or partial credit, raise "
                "rollouts_per_task, or check the reward.")  # fmt: skip


def rollout_results(future: Rollouts) -> list[RolloutResult]:
    """A finished batch's results; none if it raised."""
    return future.result() if future.exception() is None else []

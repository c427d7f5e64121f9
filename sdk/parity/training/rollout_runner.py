"""Rollouts in the background: the agent engine on an event loop of its own thread.

The run's driver stays free to watch the trainer while rollouts go on, and can
cancel them the moment the run fails or the user presses Ctrl-C: a cancelled
rollout's session is not closed, so nothing half-done is trained on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parity.clients import AssemblerClient
from parity.core.session_budget import SessionBudget
from parity.engine import AgentEngine, EngineConfig, RolloutResult
from parity.engine.runner import Agent
from parity.training.settings import TrainSettings


@dataclass(frozen=True)
class Sampling:
    """What the trainer fills into every task it hands the agent."""

    model: str
    max_tokens: int
    temperature: float


class RolloutRunner:
    def __init__(
        self,
        agent: Agent,
        assembler: AssemblerClient,
        *,
        run_id: str,
        concurrency: int,
        timeout_s: float,
        retries: int,
        history_mode: str = "",
        budget: SessionBudget | None = None,
        capped_episodes: str = "drop",
        teacher_scored: bool = False,
    ) -> None:
        self.agent = agent
        self.run_id = run_id
        self.assembler = assembler
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retries = retries
        self.history_mode = history_mode
        self.budget = budget
        self.capped_episodes = capped_episodes
        self.teacher_scored = teacher_scored
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="parity-rollouts", daemon=True
        )
        self._thread.start()
        self._running: set[concurrent.futures.Future[list[RolloutResult]]] = set()

    @classmethod
    def for_run(
        cls, agent: Agent, assembler: AssemblerClient, run_id: str, settings: TrainSettings
    ) -> RolloutRunner:
        return cls(
            agent, assembler, run_id=run_id, concurrency=settings.rollout_concurrency, timeout_s=settings.rollout_timeout_s,
            retries=settings.retries, history_mode=settings.history_mode, budget=settings.session_budget,
            capped_episodes=settings.capped_episodes, teacher_scored=bool(settings.teacher),
        )  # fmt: skip

    def submit(
        self, tasks: Sequence[dict[str, Any]], *, prefix: str, rollouts_per_task: int, sampling: Sampling,
        validation: bool = False,
    ) -> concurrent.futures.Future[list[RolloutResult]]:  # fmt: skip
        """Roll out every task `rollouts_per_task` times; sessions are named `{prefix}-{task id}-r{n}-a{attempt}`."""
        filled = [{**task, "model": sampling.model, "max_tokens": sampling.max_tokens,
                   "temperature": sampling.temperature} for task in tasks]  # fmt: skip
        config = EngineConfig(
            rollouts_per_task=rollouts_per_task, concurrency=self.concurrency, timeout_s=self.timeout_s,
            retries=self.retries, run_id=prefix, progress=False, validation=validation, training_run=self.run_id,
            history_mode=self.history_mode, budget=self.budget, capped_episodes=self.capped_episodes,
            teacher_scored=self.teacher_scored and not validation,
        )  # fmt: skip
        engine = AgentEngine(self.agent, config, assembler=self.assembler)
        future = asyncio.run_coroutine_threadsafe(engine.arun(filled), self._loop)
        self._running.add(future)
        future.add_done_callback(self._running.discard)
        return future

    @property
    def busy(self) -> bool:
        return bool(self._running)

    def cancel_all(self) -> None:
        for future in list(self._running):
            future.cancel()

    def close(self, grace_s: float = 10.0) -> None:
        """Cancel what still runs and let it unwind (sessions exit in their own context), then stop."""
        if self._loop.is_closed():
            return
        self.cancel_all()
        with contextlib.suppress(
            concurrent.futures.TimeoutError, concurrent.futures.CancelledError
        ):
            asyncio.run_coroutine_threadsafe(
                _cancel_everything(grace_s, self.agent), self._loop
            ).result(2 * grace_s + 5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(grace_s)
        if not self._thread.is_alive():
            self._loop.close()


async def _cancel_everything(grace_s: float, agent: Agent) -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=grace_s)
    # An agent that keeps processes up (an agent server) stops them on the loop that started them.
    closing = getattr(agent, "aclose", None)
    if closing is not None:
        await asyncio.wait_for(closing(), grace_s)

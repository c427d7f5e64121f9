"""Rollouts: each in its own session, bounded in time and number, always closed.

An agent is a function, sync or async, that takes a task dict and returns a float
reward, or None when it reports rewards itself with `parity.reward()`. Each rollout
runs in a session named `{run}-{task}-r{rollout}-a{attempt}`; when the rollout ends, the
engine closes its sessions with the assembler, with the outcome, the returned
reward, the rollout as the episode and the task as the group, so the assembler
knows the episode ended and which rollouts to compare. A rollout that raises or times out is closed as failed or timed out:
it is recorded, never trained on silently, and retried up to `retries` times. So is one
whose calls ingest cannot confirm are in the store (`parity.flush()`) before its close.
One that raised on ingest's refusal of a call past its session's budget is not retried:
its episode ended at the cap, and the assembler treats it as `capped_episodes` says.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.common.v1 import session_pb2
from parity.clients import AssemblerClient, RPCError
from parity.config import current_config
from parity.core.progress import show_progress
from parity.core.session_budget import REFUSAL_TYPE, SessionBudget
from parity.flushing import flush
from parity.sessions import session

log = structlog.get_logger(__name__)

Agent = Callable[[dict[str, Any]], float | None | Awaitable[float | None]]
Outcome = Literal["succeeded", "failed", "timed_out"]
# Threads beyond `concurrency`: a sync agent past its timeout keeps its thread, and the
# rollout taking its place should not queue behind it.
SPARE_THREADS = 4
PROGRESS_LINE_S = 30.0
_CAPPED_EPISODES = {
    "drop": assembler_pb.CAPPED_EPISODES_DROP,
    "zero_reward": assembler_pb.CAPPED_EPISODES_ZERO_REWARD,
    "keep_reward": assembler_pb.CAPPED_EPISODES_KEEP_REWARD,
}
_OUTCOMES = {
    "succeeded": session_pb2.SESSION_OUTCOME_SUCCEEDED,
    "failed": session_pb2.SESSION_OUTCOME_FAILED,
    "timed_out": session_pb2.SESSION_OUTCOME_TIMED_OUT,
}


@dataclass(frozen=True)
class EngineConfig:
    rollouts_per_task: int = 4
    """Rollouts of each task; they form one group for group-relative advantages."""
    concurrency: int = 16
    """Rollouts running at once."""
    timeout_s: float = 300.0
    """Wall time one rollout may take. A sync agent past it keeps its thread until it returns."""
    retries: int = 1
    """Extra attempts for a rollout that failed or timed out."""
    task_id_key: str = "id"
    """The task field naming the task; the task's position in the dataset otherwise."""
    run_id: str | None = None
    """Prefix of every session and group of a run; a fresh one per run when None, so
    running the same tasks again (the next epoch) never mixes with the last run."""
    progress: bool = True
    validation: bool = False
    """Close every rollout as validation: captured and kept, never trained on."""
    training_run: str = ""
    """The trainer run these rollouts are for: the assembler batches them for that run only."""
    history_mode: str = ""
    """How ingest builds the rollouts' prompts: as_deployed or exact_history (docs/multi-turn.md); empty: ingest's."""
    budget: SessionBudget | None = None
    """Caps ingest enforces on each rollout's session; None: ingest's serving default."""
    capped_episodes: str = "drop"
    """What a rollout whose session hit a cap trains as: drop, zero_reward or keep_reward."""
    teacher_scored: bool = False
    """The run has a distillation teacher: each rollout has signal without a reward, and a group without variance."""

    def __post_init__(self) -> None:
        if (
            self.rollouts_per_task < 1
            or self.concurrency < 1
            or self.retries < 0
            or self.timeout_s <= 0
        ):
            raise ValueError(f"invalid engine settings: {self}")
        if self.capped_episodes not in _CAPPED_EPISODES:
            raise ValueError(
                f"capped_episodes must be one of {', '.join(_CAPPED_EPISODES)}, got {self.capped_episodes!r}"
            )


@dataclass(frozen=True)
class RolloutResult:
    task_id: str
    # The task's group in this run: rollouts of one task are compared with each other.
    group_id: str
    rollout: int
    attempt: int
    session_id: str
    outcome: Outcome
    reward: float | None
    error: str
    seconds: float


class AgentEngine:
    def __init__(
        self,
        agent: Agent,
        config: EngineConfig = EngineConfig(),
        assembler: AssemblerClient | None = None,
    ) -> None:
        self.agent = agent
        self.config = config
        self.assembler = assembler or AssemblerClient(current_config().assembler_address)
        # An object whose __call__ is async (a configured agent class) is an async agent too.
        self._is_async = inspect.iscoroutinefunction(agent) or inspect.iscoroutinefunction(
            type(agent).__call__
        )

    def run(self, tasks: Iterable[Mapping[str, Any]]) -> list[RolloutResult]:
        """Run every rollout; for scripts. From async code, await `arun`."""
        return asyncio.run(self.arun(tasks))

    async def arun(self, tasks: Iterable[Mapping[str, Any]]) -> list[RolloutResult]:
        """Every attempt of every rollout, in task order."""
        run_id = self.config.run_id or uuid.uuid4().hex[:8]
        jobs = [
            (str(task.get(self.config.task_id_key, index)), dict(task), rollout)
            for index, task in enumerate(tasks)
            for rollout in range(self.config.rollouts_per_task)
        ]
        limit = asyncio.Semaphore(self.config.concurrency)
        # In a log, a line every PROGRESS_LINE_S at most: rollouts end many times a second.
        progress = show_progress(total=len(jobs), desc="rollouts", unit="rollout", enabled=self.config.progress,
                                 every_s=PROGRESS_LINE_S)  # fmt: skip
        # Sync agents, flushes and closes run here, not in asyncio's default executor,
        # whose min(32, cores + 4) threads would cap `concurrency` (at 6 on 2 cores).
        threads = ThreadPoolExecutor(
            self.config.concurrency + SPARE_THREADS, thread_name_prefix="parity-rollout"
        )

        async def run_job(task_id: str, task: dict[str, Any], rollout: int) -> list[RolloutResult]:
            async with limit:
                attempts = await self._rollout(
                    threads, task_id, f"{run_id}-{task_id}", task, rollout
                )
            progress.update(1)
            failed = sum(a.outcome != "succeeded" for a in attempts)
            progress.set_postfix(failed_attempts=failed, refresh=False)
            return attempts

        try:
            per_job = await asyncio.gather(*(run_job(*job) for job in jobs))
        finally:
            progress.close()
            # Without waiting: a sync agent past its timeout may never return.
            threads.shutdown(wait=False)
        return [attempt for attempts in per_job for attempt in attempts]

    async def _rollout(
        self,
        threads: ThreadPoolExecutor,
        task_id: str,
        group_id: str,
        task: dict[str, Any],
        rollout: int,
    ) -> list[RolloutResult]:
        attempts = []
        for attempt in range(self.config.retries + 1):
            result = await self._attempt(threads, task_id, group_id, task, rollout, attempt)
            attempts.append(result)
            # An agent that raised on a capped call would meet the same cap again: its episode is over.
            if result.outcome == "succeeded" or REFUSAL_TYPE in result.error:
                break
        # All attempts share the rollout's episode, and close together once the last one
        # ends: the assembler never batches the group while a retry is still running. The
        # last attempt closes first, so the episode the assembler counts as closed is
        # always the one that holds its outcome, never a superseded failure alone.
        for result in reversed(attempts):
            await _in_thread(threads, self._close, result, f"{group_id}-r{rollout}")
        return attempts

    async def _attempt(
        self,
        threads: ThreadPoolExecutor,
        task_id: str,
        group_id: str,
        task: dict[str, Any],
        rollout: int,
        attempt: int,
    ) -> RolloutResult:
        session_id = f"{group_id}-r{rollout}-a{attempt}"
        started = time.monotonic()
        outcome: Outcome = "succeeded"
        reward: float | None = None
        error = ""
        async with session(session_id, history_mode=self.config.history_mode or None, budget=self.config.budget,
                           task=task_id, rollout=str(rollout), attempt=str(attempt)):  # fmt: skip
            try:
                returned = await asyncio.wait_for(self._call(threads, task), self.config.timeout_s)
                reward = _as_reward(returned)
                # Before the close: the assembler builds the rollout from the calls in the
                # store, and ingest may still hold the last ones.
                await _in_thread(threads, flush)
            except TimeoutError:
                outcome, error = "timed_out", f"rollout exceeded {self.config.timeout_s:g} s"
            except Exception as failure:  # noqa: BLE001 - the agent's failure is the rollout's outcome
                outcome, error = "failed", f"{type(failure).__name__}: {failure}"
                log.warning("rollout_failed", session_id=session_id, error=error)
        return RolloutResult(
            task_id,
            group_id,
            rollout,
            attempt,
            session_id,
            outcome,
            reward,
            error,
            time.monotonic() - started,
        )

    async def _call(self, threads: ThreadPoolExecutor, task: dict[str, Any]) -> Any:
        if self._is_async:
            return await self.agent(task)  # type: ignore[misc]
        return await _in_thread(threads, self.agent, task)

    def _close(self, result: RolloutResult, episode_id: str) -> None:
        request = assembler_pb.CloseSessionRequest(
            session_id=result.session_id, outcome=_OUTCOMES[result.outcome], error_message=result.error[:2000],
            group_id=result.group_id, episode_id=episode_id, group_size=self.config.rollouts_per_task,
            validation=self.config.validation, run_id=self.config.training_run,
            capped_episodes=_CAPPED_EPISODES[self.config.capped_episodes], teacher_scored=self.config.teacher_scored,
        )  # fmt: skip
        if result.reward is not None:
            request.reward = result.reward
        try:
            self.assembler.close_session(request)
        except RPCError as failure:
            # Loud, not fatal: the other rollouts still run; the session stays open in the store.
            log.error("close_session_failed", session_id=result.session_id, error=str(failure))


async def _in_thread(threads: ThreadPoolExecutor, function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` in one of the run's threads, with the current context: the
    session goes into the agent's thread, as with asyncio.to_thread."""
    call = functools.partial(contextvars.copy_context().run, function, *args)
    return await asyncio.get_running_loop().run_in_executor(threads, call)


def _as_reward(returned: Any) -> float | None:
    if returned is None:
        return None
    if isinstance(returned, bool) or not isinstance(returned, int | float):
        raise TypeError(f"an agent returns a float reward or None, got {type(returned).__name__}")
    if not math.isfinite(returned):
        raise ValueError(f"an agent's reward must be finite, got {returned}")
    return float(returned)


def run(agent: Agent, tasks: Iterable[Mapping[str, Any]], **settings: Any) -> list[RolloutResult]:
    """Run `agent` over `tasks`; settings are EngineConfig's fields."""
    return AgentEngine(agent, EngineConfig(**settings)).run(tasks)

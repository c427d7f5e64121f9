"""Group commit: writes queued together commit together, on one writer thread.

The writer task takes every write queued while the previous transaction was
committing and commits those of one kind (one commit function) together, so
concurrent writers share one transaction (and one fsync) instead of queueing on the
database lock. A commit function takes the payloads of its group and returns one
result per payload, or the error that refused that payload alone; the others in its
transaction commit. A write's future resolves only after its transaction commits: an
acknowledged write is durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from parity.services.runtime.errors import ParityError
from parity.services.store.writer_thread import WriterThread

log = structlog.get_logger(__name__)

Commit = Callable[[list[Any]], list[Any]]


@dataclass
class _Job:
    commit: Commit
    payload: Any
    weight: int
    alone: bool
    future: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class WriteQueue:
    def __init__(self, thread_name: str, max_group_weight: int) -> None:
        self.max_group_weight = max_group_weight
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._writer = WriterThread(thread_name)
        self._committed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def committed(self) -> asyncio.Event:
        """Set by the next commit: wait on it to hear of one (take it before reading)."""
        return self._committed

    def wake_readers(self) -> None:
        """Set the current event without a commit: readers waiting on it look again."""
        self._committed.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._write_loop(), name="token-store-writer")

    async def stop(self) -> None:
        """Finish every queued write, then end the writer."""
        await self._queue.join()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.to_thread(self._writer.close)

    async def submit(
        self, commit: Commit, payload: Any, *, weight: int = 0, alone: bool = False
    ) -> Any:
        """`commit([payload, ...])`'s result for `payload`, once its transaction committed. `weight` counts
        toward the group's limit (calls per transaction); an `alone` write commits in a transaction of its own."""
        job = _Job(commit, payload, weight, alone)
        self._queue.put_nowait(job)
        return await job.future

    async def _write_loop(self) -> None:
        while True:
            first = await self._queue.get()
            jobs, weight = [first], first.weight
            while not self._queue.empty() and weight < self.max_group_weight:
                job = self._queue.get_nowait()
                jobs.append(job)
                weight += job.weight
            # Writes queued together were concurrent, so any order among them is one
            # their callers could have seen: each kind commits as one transaction.
            groups: dict[Commit, list[_Job]] = {}
            for job in jobs:
                groups.setdefault(job.commit, []).append(job)
            for commit, group in groups.items():
                for part in ([job] for job in group) if group[0].alone else [group]:
                    try:
                        await self._run_group(commit, part)
                    except Exception as error:
                        # The writer serves every later write and stop()'s join: whatever
                        # went wrong in one group, it answers that group and goes on.
                        log.exception("write_group_failed", kind=_kind(commit), requests=len(part))
                        for job in part:
                            _settle(job, error)

    async def _run_group(self, commit: Commit, jobs: list[_Job]) -> None:
        try:
            results = await self._writer.run(commit, [job.payload for job in jobs])
        except Exception as error:  # noqa: BLE001 - every waiter must hear about it
            if isinstance(error, ParityError):
                # Expected and explained (a full disk, a lost database connection), and
                # retried by callers while it lasts: a traceback each time would only
                # fill the log, on what may be the full disk.
                log.warning(
                    "write_failed", kind=_kind(commit), requests=len(jobs), error=str(error)
                )
            else:
                log.error("write_failed", kind=_kind(commit), requests=len(jobs), exc_info=error)
            for job in jobs:
                _settle(job, error)
        else:
            for job, result in zip(jobs, results, strict=False):
                _settle(job, result)
            self._committed.set()
            self._committed = asyncio.Event()
        finally:
            for _ in jobs:
                self._queue.task_done()


def _kind(commit: Commit) -> str:
    return getattr(commit, "__name__", repr(commit))


def _settle(job: _Job, result: Any) -> None:
    """Answer the job's caller, unless it has stopped waiting: a cancelled request
    (deadline, client cancel, shutdown) still commits, but its future is done."""
    if job.future.done():
        return
    if isinstance(result, Exception):
        job.future.set_exception(result)
    else:
        job.future.set_result(result)

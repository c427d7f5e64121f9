"""Gets late feedback into the token store, or into the local spool, behind the calls it is about.

Feedback scores a session, and the store knows a session once its first call is
stored. An agent may send feedback right after its last call, which may still be on
its way (durability "after", a slow store), so the calls captured so far are flushed
first, for a bounded time. Feedback that cannot be written now (the store does not
answer, or calls still wait in the spool) is spooled, in the spool's `feedback`
table, and answered as `spooled`; it is replayed oldest first once every call
captured before the replay is stored, so its session exists by then. While feedback
waits in the spool, new feedback joins it there, so feedback is written in the order
it arrived.

The store answers a write as stored, as a duplicate (the id holds this same reward:
a retry), or with a refusal: NOT_FOUND (no such session, or call), ALREADY_EXISTS
(the id holds another reward), INVALID_ARGUMENT. A live refusal is the sender's to
hear (FeedbackRefused); a replayed one cannot be told to anyone, so it moves to the
spool's `refused` table with the reason and is logged: never retried forever, never
dropped silently. Every write carries its id, so a write that timed out here but
committed there replays as a harmless duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

import grpc
import structlog

from parity.api.common.v1 import reward_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import AsyncStoreClient, RPCError
from parity.services.ingest import openai_errors
from parity.services.ingest.capture.capture_sink import CaptureSink

log = structlog.get_logger(__name__)

FeedbackStatus = Literal["stored", "duplicate", "spooled"]
# The store answered and said no: writing the same reward again cannot succeed.
REFUSALS = frozenset({
    grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.RESOURCE_EXHAUSTED,
})  # fmt: skip
# Feedback rows read per replay round; each is written alone (see _replay).
REPLAY_BATCH = 64
RECONNECT_BACKOFF_MS = 2000


class FeedbackRefused(Exception):
    """The store refused the feedback; `code` says why (NOT_FOUND, ALREADY_EXISTS, ...)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class _StoreUnreachable(Exception):
    """The store did not answer; the feedback may be written later."""


class FeedbackSink:
    def __init__(self, calls: CaptureSink, *, retry_interval_s: float = 1.0) -> None:
        self.calls = calls
        self.spool = calls.spool
        self.store_timeout_s = calls.store_timeout_s
        self.retry_interval_s = retry_interval_s
        # No retries inside the client: what the store does not take at once is spooled, which is durable, and an
        # agent waits no longer than one store timeout for its answer.
        # gRPC waits ever longer (up to 2 minutes) between reconnects to a store that is down; capped, spooled
        # feedback is written within seconds of the store's return.
        self._store = AsyncStoreClient(calls.store_address, timeout_s=calls.store_timeout_s, retries=0,
                                       options=[("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS)])  # fmt: skip
        self._wakeup = asyncio.Event()
        self._store_reachable = True
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="feedback-replay")
        if self.spool.feedback_count:
            # Left from a previous run.
            log.info("feedback_spooled_at_start", feedback=self.spool.feedback_count)
            self._wakeup.set()

    async def stop(self) -> None:
        """Stop replaying; before the call sink stops, which closes the spool. A write cut short here is
        replayed by the next run (as a duplicate if it had committed)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._store.close()

    async def keep(self, reward: reward_pb2.Reward) -> FeedbackStatus:
        """Write `reward` to the store, or spool it. Raises FeedbackRefused if the store refuses it, and an
        UNAVAILABLE HttpError if it can be neither stored nor spooled."""
        if not self.spool.feedback_count and not self.spool.count:
            try:
                await self.calls.flush(self.store_timeout_s)
            except openai_errors.HttpError as waiting:
                reason = waiting.message
            else:
                try:
                    return await self._write(reward)
                except _StoreUnreachable as error:
                    reason = str(error)
        elif self.spool.feedback_count:
            reason = f"{self.spool.feedback_count} feedback wait in the spool before it"
        else:
            reason = (
                f"{self.spool.count} calls wait in the spool while the token store is unreachable"
            )
        await self._spool(reward, reason)
        return "spooled"

    async def _write(self, reward: reward_pb2.Reward) -> Literal["stored", "duplicate"]:
        try:
            answer = await self._store.write_rewards(store_pb.WriteRewardsRequest(rewards=[reward]))
        except RPCError as error:
            if error.code in REFUSALS:
                raise FeedbackRefused(error.code, error.message) from None
            raise _StoreUnreachable(f"the token store at {self.calls.store_address} did not take it: "
                                    f"{error.code.name}: {error.message}") from None  # fmt: skip
        return "duplicate" if answer.duplicate_count else "stored"

    async def _spool(self, reward: reward_pb2.Reward, reason: str) -> None:
        if self.spool.full:
            raise openai_errors.unavailable(
                f"feedback cannot be kept: the token store at {self.calls.store_address} does not take it now "
                f"({reason}) and the capture spool is full; retry later"
            )
        try:
            await asyncio.to_thread(self.spool.append_feedback, reward.SerializeToString())
        except Exception as error:  # noqa: BLE001 - the disk under the spool: the sender hears it and retries
            log.error("feedback_spool_failed", session_id=reward.session_id, feedback_id=reward.reward_id,
                      spool=str(self.spool.path), exc_info=error)  # fmt: skip
            raise openai_errors.unavailable(
                f"feedback cannot be kept: the token store does not take it now ({reason}) and the spool "
                f"{self.spool.path} cannot be written ({error}); retry later"
            ) from None
        log.info("feedback_spooled", session_id=reward.session_id, feedback_id=reward.reward_id, reason=reason,
                 waiting=self.spool.feedback_count)  # fmt: skip
        self._wakeup.set()

    async def _run(self) -> None:
        while True:
            if not self.spool.feedback_count:
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            try:
                await self._replay()
            except Exception as error:  # noqa: BLE001 - replay must outlive any one failure (the spool's disk)
                log.error("feedback_replay_failed", spool=str(self.spool.path), exc_info=error)
            if self.spool.feedback_count:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), self.retry_interval_s)
                self._wakeup.clear()

    async def _replay(self) -> None:
        """Write the spooled feedback, oldest first, until none is left or the store stops answering."""
        try:
            # Every call captured so far in the store first: the sessions the feedback scores exist by then.
            await self.calls.flush(self.store_timeout_s)
        except openai_errors.HttpError:
            return
        while rows := await asyncio.to_thread(self.spool.oldest_feedback, REPLAY_BATCH):
            for seq, serialized in rows:
                # One reward per write: the store refuses a request whole, and one refused feedback must not
                # hold back, or take down, the others.
                reward = reward_pb2.Reward.FromString(serialized)
                fields = {"session_id": reward.session_id, "feedback_id": reward.reward_id}
                try:
                    status = await self._write(reward)
                except _StoreUnreachable as error:
                    if self._store_reachable:
                        log.warning("feedback_replay_waits_for_store", error=str(error),
                                    waiting=self.spool.feedback_count)  # fmt: skip
                    self._store_reachable = False
                    return
                except FeedbackRefused as refusal:
                    await asyncio.to_thread(self.spool.refuse_feedback, seq, str(refusal))
                    log.error("store_refused_feedback", **fields, reason=str(refusal))
                else:
                    await asyncio.to_thread(self.spool.remove_feedback, seq)
                    log.info(
                        "feedback_replayed", **fields, status=status, left=self.spool.feedback_count
                    )
                self._store_reachable = True

"""One trainer's StreamBatches subscription: credit-based flow control and redelivery.

The trainer holds at most `max_unacked_batches` batches it has not acknowledged; each
acknowledgement grants one more. A new subscription first redelivers the consumer's
unacknowledged batches (flagged `redelivered`), oldest first, then sends new ones.
A newer subscription of the same consumer takes over: the older one ends with
FAILED_PRECONDITION, and its acknowledgements still count.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from parity.services.assembler.batches import Batch
from parity.services.runtime.errors import FailedPrecondition, InvalidArgument, ParityError

if TYPE_CHECKING:
    from parity.services.assembler.assembler import Assembler

MAX_GROUPS_PER_BATCH = 10_000
MAX_UNACKED_BATCHES = 1_000


@dataclass(frozen=True)
class Subscription:
    consumer_id: str
    groups_per_batch: int
    max_unacked_batches: int
    policy_version: int | None
    max_policy_lag: int | None
    run_id: str = ""

    def __post_init__(self) -> None:
        if not self.consumer_id:
            raise InvalidArgument("subscribe.consumer_id is required")
        if not 1 <= self.groups_per_batch <= MAX_GROUPS_PER_BATCH:
            raise InvalidArgument(f"subscribe.groups_per_batch must be in 1..{MAX_GROUPS_PER_BATCH}, got {self.groups_per_batch}")
        if not 1 <= self.max_unacked_batches <= MAX_UNACKED_BATCHES:
            raise InvalidArgument(
                f"subscribe.max_unacked_batches must be in 1..{MAX_UNACKED_BATCHES}, got {self.max_unacked_batches}"
            )
        if self.max_policy_lag is not None and self.max_policy_lag < 0:
            raise InvalidArgument(f"subscribe.max_policy_lag must not be negative, got {self.max_policy_lag}")


class BatchFeed:
    def __init__(self, assembler: Assembler, subscription: Subscription, redeliver: list[int]) -> None:
        self.assembler = assembler
        self.subscription = subscription
        self.policy_version = subscription.policy_version
        self._redeliver = deque(redeliver)
        # Sequences sent on this stream and not acknowledged yet: the credit in use.
        self._outstanding: set[int] = set()
        self._failure: ParityError | None = None

    @property
    def consumer_id(self) -> str:
        return self.subscription.consumer_id

    async def next_batch(self) -> Batch:
        """The next batch to send, once there is credit and data for one."""
        while True:
            changed = self.assembler.changed
            if self._failure is not None:
                raise self._failure
            if len(self._outstanding) < self.subscription.max_unacked_batches:
                batch = await self._take()
                if batch is not None:
                    self._outstanding.add(batch.sequence)
                    return batch
            await self.assembler.wait(changed)

    async def _take(self) -> Batch | None:
        while self._redeliver:
            plan = self.assembler.ledger(self.consumer_id).unacknowledged.get(self._redeliver.popleft())
            if plan is not None:
                return await self.assembler.rebuild_batch(plan)
        return await self.assembler.form_batch(self)

    async def acknowledge(self, batch_id: str, policy_version: int | None) -> None:
        sequence = await self.assembler.acknowledge(self.consumer_id, batch_id)
        self._outstanding.discard(sequence)
        if policy_version is not None:
            self.policy_version = policy_version
        self.assembler.notify()

    def fail(self, error: ParityError) -> None:
        """End the stream with `error` at the next batch it waits for."""
        self._failure = error
        self.assembler.notify()

    def supersede(self) -> None:
        self.fail(FailedPrecondition(f"consumer {self.consumer_id!r} subscribed again on another stream"))

    def close(self) -> None:
        self.assembler.release(self)


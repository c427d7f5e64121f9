"""One trainer's StreamBatches subscription: credit-based flow control and redelivery.

The trainer holds at most `max_unacked_batches` batches it has not acknowledged; each
acknowledgement grants one more. A new subscription first redelivers the consumer's
unacknowledged batches (flagged `redelivered`), oldest first, then sends new ones.
A newer subscription of the same consumer takes over: the older one ends with
FAILED_PRECONDITION, and its acknowledgements still count.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from parity.services.assembler.batch_former import BatchFormer
from parity.services.assembler.batches import Batch
from parity.services.assembler.changes import Changes
from parity.services.runtime.errors import FailedPrecondition, InvalidArgument, ParityError

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
            raise InvalidArgument(
                f"subscribe.groups_per_batch must be in 1..{MAX_GROUPS_PER_BATCH}, got {self.groups_per_batch}"
            )
        if not 1 <= self.max_unacked_batches <= MAX_UNACKED_BATCHES:
            raise InvalidArgument(
                f"subscribe.max_unacked_batches must be in 1..{MAX_UNACKED_BATCHES}, got {self.max_unacked_batches}"
            )
        if self.max_policy_lag is not None and self.max_policy_lag < 0:
            raise InvalidArgument(
                f"subscribe.max_policy_lag must not be negative, got {self.max_policy_lag}"
            )


class BatchFeed:
    def __init__(
        self, former: BatchFormer, changes: Changes, subscription: Subscription, redeliver: list[int],
        on_close: Callable[[BatchFeed], None],
    ) -> None:  # fmt: skip
        self.former = former
        self.changes = changes
        self.subscription = subscription
        self.policy_version = subscription.policy_version
        self._redeliver = deque(redeliver)
        self._on_close = on_close
        # Sequences sent on this stream and not acknowledged yet: the credit in use.
        self._outstanding: set[int] = set()
        self._failure: ParityError | None = None

    @property
    def consumer_id(self) -> str:
        return self.subscription.consumer_id

    async def next_batch(self) -> Batch:
        """The next batch to send, once there is credit and data for one."""
        while True:
            changed = self.changes.event
            if self._failure is not None:
                raise self._failure
            if len(self._outstanding) < self.subscription.max_unacked_batches:
                batch = await self._take()
                if batch is not None:
                    self._outstanding.add(batch.sequence)
                    return batch
            await self.changes.wait(changed)

    async def _take(self) -> Batch | None:
        while self._redeliver:
            plan = self.former.unacknowledged(self.consumer_id, self._redeliver.popleft())
            if plan is not None:
                return await self.former.rebuild_batch(plan)
        subscription = self.subscription
        staleness = self.former.staleness(subscription.max_policy_lag, self.policy_version)
        return await self.former.form_batch(self.consumer_id, subscription.groups_per_batch, subscription.run_id,
                                            staleness)  # fmt: skip

    async def acknowledge(self, batch_id: str, policy_version: int | None) -> None:
        sequence = await self.former.acknowledge(self.consumer_id, batch_id)
        self._outstanding.discard(sequence)
        if policy_version is not None:
            self.policy_version = policy_version
        self.changes.notify()

    def fail(self, error: ParityError) -> None:
        """End the stream with `error` at the next batch it waits for."""
        self._failure = error
        self.changes.notify()

    def supersede(self) -> None:
        self.fail(
            FailedPrecondition(f"consumer {self.consumer_id!r} subscribed again on another stream")
        )

    def close(self) -> None:
        self._on_close(self)

"""The assembler: follows the store's closes, groups rollouts, scores them, and builds and
delivers batches exactly once.

Two owners, one concern each: the rollout tracker (closes, groups, scoring, readiness,
the SDK's closes and rewards) and the batch former (forming, redelivering and
acknowledging batches, the consumers' ledgers). This object wires them together and
keeps one StreamBatches feed per consumer; the servicer asks the tracker for closes,
rewards and pending groups. Run one assembler per store.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from parity.services.assembler.batch_feed import BatchFeed, Subscription
from parity.services.assembler.batch_former import BatchFormer
from parity.services.assembler.batches import ConsumerLedgers
from parity.services.assembler.rollout_tracker import (
    AssemblerStats,
    AssemblySettings,
    RolloutTracker,
)
from parity.services.assembler.scoring import Scorer
from parity.services.assembler.store_client import StoreClient

log = structlog.get_logger(__name__)


class Assembler:
    def __init__(
        self, store: StoreClient, settings: AssemblySettings, scorers: Sequence[Scorer] = ()
    ) -> None:
        self.store = store
        self.stats = AssemblerStats()
        ledgers = ConsumerLedgers()
        self.tracker = RolloutTracker(store, settings, scorers, self.stats, ledgers)
        self.former = BatchFormer(self.tracker, ledgers)
        self._feeds: dict[str, BatchFeed] = {}

    async def start(self) -> None:
        await self.tracker.start()

    async def stop(self) -> None:
        await self.tracker.stop()
        await self.store.close()

    async def subscribe(self, subscription: Subscription) -> BatchFeed:
        # The ledger is complete only once every close has been replayed.
        await self.tracker.caught_up.wait()
        previous = self._feeds.get(subscription.consumer_id)
        if previous is not None:
            previous.supersede()
        # A new run under the same consumer id never gets the batches an earlier run left unacknowledged (its last
        # ack lost as it ended): they would train this run on another run's rollouts.
        unacknowledged = self.former.ledgers.of(subscription.consumer_id).unacknowledged
        redeliver = sorted(
            seq for seq, plan in unacknowledged.items() if plan.serves(subscription.run_id)
        )
        feed = self._feeds[subscription.consumer_id] = BatchFeed(
            self.former, self.tracker.changes, subscription, redeliver, self._release
        )
        log.info("subscribed", consumer_id=subscription.consumer_id, redeliver=len(redeliver))
        return feed

    def _release(self, feed: BatchFeed) -> None:
        if self._feeds.get(feed.consumer_id) is feed:
            del self._feeds[feed.consumer_id]

"""The policy a run trains, shared by its run loop and the RPCs that save or push it.

One lock guards it, so a SaveCheckpoint or SyncWeights RPC never sees weights halfway
through an optimizer step. The last run's policy stays until a new run replaces it. Runs
trained at once on one base model share its lock (`SharedBase.lock`): they take turns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parity.services.runtime.errors import Unavailable
from parity.services.trainer.backends import TrainingBackend
from parity.services.trainer.fair_lock import FairLock
from parity.services.trainer.weight_sync import SyncResult, WeightSync


@dataclass
class LivePolicy:
    weight_sync: WeightSync
    lock: FairLock = field(default_factory=FairLock)
    backend: TrainingBackend | None = None
    last_sync: SyncResult | None = None

    def loaded(self) -> TrainingBackend:
        """The backend; call with the lock held."""
        if self.backend is None:
            raise Unavailable("the run's model is not loaded yet; try again in a moment")
        return self.backend

    def push(self, policy_version: int, verify: bool = True) -> SyncResult:
        """Sync the replicas to the loaded policy as `policy_version`; call with the lock held."""
        self.last_sync = self.weight_sync.sync(self.loaded(), policy_version, verify=verify)
        return self.last_sync

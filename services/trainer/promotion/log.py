"""Every promotion decision, on disk beside the trainer's work: what serves, and what served before.

One JSON line per decision in `<work_dir>/promotions.jsonl`, appended and synced before
the answer goes out. A promotion records the policy it put in service and the one it
replaced; a rollback pops the last standing promotion and records what serves again, so
replaying the file gives the stack of standing promotions (and repeated rollbacks walk
back through them). A canary changes only which sessions the candidate serves; the next
promotion or rollback ends it. A refusal changes nothing and is kept for the record.

A promotion under a model name of its own (one tenant's, `served_model`) reaches only the
users whose agents ask for that name: each name has its own stack of standing promotions,
and the canary belongs to what every user is served.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parity.services.trainer.weight_sync import PushedPolicy

PROMOTED, REFUSED, ROLLED_BACK, CANARY = "promoted", "refused", "rolled_back", "canary"
LOG_FILE = "promotions.jsonl"


@dataclass(frozen=True)
class ServedPolicy:
    """A policy the serving replicas can be made to serve, and how to check that they do."""

    run_id: str
    checkpoint_id: str
    """Empty for the model a run started from."""
    folder: str
    """The folder the replicas load (a model or an adapter); empty: the base model as loaded, no adapter."""
    adapter: bool
    probe: list[int]
    """The probe's token ids."""
    expected: list[float]
    """The policy's logprobs of the probe's tokens after the first."""
    dtype: str

    def pushed(self) -> PushedPolicy:
        return PushedPolicy(
            Path(self.folder) if self.folder else None,
            self.adapter,
            self.probe,
            self.expected,
            self.dtype,
        )

    def describe(self) -> str:
        if self.checkpoint_id:
            return f"checkpoint {self.checkpoint_id}"
        return (
            f"the model run {self.run_id} started from"
            if self.run_id
            else "the model served before"
        )


@dataclass(frozen=True)
class PromotionRecord:
    promotion_id: str
    outcome: str
    run_id: str
    checkpoint_id: str
    policy_version: int
    metric: str
    baseline: float
    candidate: float
    margin: float
    reason: str
    create_time: float
    max_logprob_diff: float = 0.0
    path: str = ""
    canary_share: float = 0.0
    served: ServedPolicy | None = None
    """What serves after a promotion or a rollback."""
    replaced: ServedPolicy | None = None
    """What a promotion put out of service: a rollback of it serves this again."""
    served_model: str = ""
    """The model name whose users the decision concerns; empty: every user."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, line: str) -> PromotionRecord:
        data: dict[str, Any] = json.loads(line)
        for key in ("served", "replaced"):
            if data.get(key) is not None:
                data[key] = ServedPolicy(**data[key])
        return cls(**data)


class PromotionLog:
    def __init__(self, work_dir: Path) -> None:
        self.path = work_dir / LOG_FILE
        self._lock = threading.Lock()

    def records(self) -> list[PromotionRecord]:
        """Oldest first."""
        if not self.path.exists():
            return []
        return [
            PromotionRecord.from_json(line)
            for line in self.path.read_text().splitlines()
            if line.strip()
        ]

    def append(self, record: PromotionRecord) -> PromotionRecord:
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as file:
                file.write(record.to_json() + "\n")
                file.flush()
                os.fsync(file.fileno())
        return record

    def standing(self, served_model: str = "") -> list[PromotionRecord]:
        """The promotions in force under `served_model`, oldest first: each rollback took back the latest one
        before it."""
        stack: list[PromotionRecord] = []
        for record in self.records():
            if record.served_model != served_model:
                continue
            if record.outcome == PROMOTED:
                stack.append(record)
            elif record.outcome == ROLLED_BACK and stack:
                stack.pop()
        return stack

    def running_canary(self) -> PromotionRecord | None:
        """The canary now serving a share of sessions: the last decision that changed what serves, if it started one."""
        deciding = [
            record
            for record in self.records()
            if record.outcome != REFUSED and not record.served_model
        ]
        return deciding[-1] if deciding and deciding[-1].outcome == CANARY else None

    def next_id(self) -> str:
        return f"promotion-{len(self.records()) + 1:06d}"

    def highest_policy_version(self) -> int:
        return max((record.policy_version for record in self.records()), default=0)

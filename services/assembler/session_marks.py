"""What the assembler writes into session metadata, so it can rebuild its state from the
store alone after a restart.

Every key is under `parity.`. CloseSession records the rollout's place
(`parity.group_id`, `parity.episode_id`, `parity.group_size`, and `parity.validation`
for a rollout never to be trained on); the batch feed records
delivery and acknowledgement (`parity.batch`); filters and scoring record why a
rollout was dropped (`parity.filtered`, with the message in `parity.error`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

GROUP_ID = "parity.group_id"
EPISODE_ID = "parity.episode_id"
GROUP_SIZE = "parity.group_size"
BATCH = "parity.batch"
FILTERED = "parity.filtered"
ERROR = "parity.error"
# "true" on validation rollouts, which are kept and scored but never batched.
VALIDATION = "parity.validation"
# The training run a rollout is for; a feed for another run leaves it alone.
RUN_ID = "parity.run_id"
# What the rollout trains as if ingest refused one of its calls past its session's budget:
# drop, zero_reward or keep_reward (CloseSessionRequest.capped_episodes).
CAPPED_EPISODES = "parity.capped_episodes"
# "true" on rollouts of a run whose teacher scores every sampled token (CloseSessionRequest.teacher_scored).
TEACHER_SCORED = "parity.teacher_scored"
# "true" on a stored production session a from-store run adopted: its reward is the run's feedback rule's.
FROM_STORE = "parity.from_store"
RESERVED_PREFIX = "parity."


@dataclass(frozen=True, slots=True)
class BatchMark:
    """A rollout's place in a consumer's batch: written before the batch is sent, and
    again, acknowledged, once the trainer acknowledges it."""

    consumer_id: str
    sequence: int
    acknowledged: bool
    # What the staleness filter judged the batch against, so a redelivery drops the
    # same samples as the first delivery did.
    policy_version: int | None
    max_policy_lag: int | None

    @property
    def batch_id(self) -> str:
        return batch_id(self.consumer_id, self.sequence)

    def encode(self) -> str:
        return json.dumps(
            {"consumer": self.consumer_id, "sequence": self.sequence, "acknowledged": self.acknowledged,
             "policy_version": self.policy_version, "max_policy_lag": self.max_policy_lag},
            separators=(",", ":"),
        )  # fmt: skip

    @classmethod
    def decode(cls, value: str) -> BatchMark:
        """Raises ValueError when the value is not a mark this assembler wrote."""
        try:
            raw = json.loads(value)
            mark = cls(
                raw["consumer"],
                raw["sequence"],
                raw["acknowledged"],
                raw["policy_version"],
                raw["max_policy_lag"],
            )
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ValueError(f"{BATCH} {value!r} is malformed ({error})") from None
        if not (
            isinstance(mark.consumer_id, str) and _is_int(mark.sequence) and mark.sequence > 0
            and isinstance(mark.acknowledged, bool)
            and (mark.policy_version is None or _is_int(mark.policy_version))
            and (mark.max_policy_lag is None or _is_int(mark.max_policy_lag))
        ):  # fmt: skip
            raise ValueError(f"{BATCH} {value!r} is malformed")
        return mark


def batch_id(consumer_id: str, sequence: int) -> str:
    """Stable across redelivery, unique across consumers."""
    return f"{consumer_id}/{sequence}"


def task_metadata(metadata: dict[str, str]) -> dict[str, str]:
    """The session's own metadata (the task), without what Parity wrote into it."""
    return {k: v for k, v in metadata.items() if not k.startswith(RESERVED_PREFIX)}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

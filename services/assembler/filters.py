"""What is never trained on, and the names each drop is counted under.

| name | drops | setting |
|---|---|---|
| failed_rollout | rollouts whose session closed failed, timed out or cancelled | --drop-failed-rollouts |
| unrewarded_trajectory | trajectories no reward of any source scores | --drop-unrewarded |
| zero_variance_group | groups of 2+ trajectories whose returns are all equal | --drop-zero-variance-groups |
| overlong_sample | samples over --max-sample-tokens with --overlong drop (or nothing sampled left after truncation) | --max-sample-tokens, --overlong |
| stale_sample | samples more than the lag behind the trainer's policy version | max_policy_lag (subscription or --max-policy-lag) |
| empty_group | groups left with no sample after the filters above | always |
| late_rollout | rollouts that closed after their group was batched or dropped | always |
| malformed_metadata, reward_function_error, judge_error, missing_session | bad input, recorded on the rollout | always |

Truncated samples are kept (truncated_count, not a filter).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parity.services.assembler.prefix_merge import DEFAULT_MAX_OPEN_THREADS
from parity.services.assembler.samples import LengthLimit

# Where a named thread's samples find the others their advantage is relative to: the episode's group (every
# sample of the group's episodes, whatever its thread), or its role (the samples of the threads of the same
# name across the group's episodes: an orchestrator is compared with orchestrators, a judge with judges).
THREAD_ADVANTAGES = ("episode", "role")


@dataclass(frozen=True)
class FilterSettings:
    """What is trained on, and how samples are cut and grouped."""

    drop_failed_rollouts: bool = True
    drop_unrewarded: bool = True
    drop_zero_variance_groups: bool = True
    length: LengthLimit = field(default_factory=LengthLimit)
    max_open_threads: int = DEFAULT_MAX_OPEN_THREADS
    thread_advantage: str = "episode"


@dataclass(frozen=True)
class Staleness:
    """The trainer's policy version and how far behind it a sample may be."""

    policy_version: int
    max_lag: int

    def is_stale(self, sample_policy_version: int) -> bool:
        return sample_policy_version < self.policy_version - self.max_lag

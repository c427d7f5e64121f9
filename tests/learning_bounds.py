"""Whether a measured rise is learning or chance: the one statistic every test that claims a model learns uses.

A learning test estimates a gain from its own samples, with the standard error of that estimate:
- `difference_of_means`: fresh samples before and after training (Welch's standard error);
- `paired_difference`: the same held-out tasks before and after, one difference per task;
- `trend`: a run's rollout rewards regressed on their step, the fitted rise from its first step to its last.
`assert_learned` passes when the gain is at least MIN_Z standard errors and a model that learns nothing (a gain of
0 in expectation) would reach that bound with probability at most CHANCE. With few degrees of freedom (32 paired
tasks, say) the bound is Student's t quantile, which sits above MIN_Z. Every failure prints the gain, its SE, z,
the sample sizes and that probability. `run_rewards` reads a `parity.train` run's rollout rewards back from its
assembler, for the tests that measure a run's own rollouts.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.clients import AssemblerClient

# What a paired comparison pairs by: a task's id, its question.
Task = TypeVar("Task", bound=Hashable)

CHANCE = 1e-3
"""The most a learning test may pass by chance: a model that learns nothing passes it at most once in 1,000 runs."""
MIN_Z = 3.1
"""The normal distribution's 1-in-1,000 quantile (P(Z >= 3.1) = 9.7e-4), the least any learning test asks for."""


@dataclass(frozen=True)
class Gain:
    """A rise measured in a test, with the standard error of its own estimate."""

    what: str
    gain: float
    se: float
    dof: float
    """Degrees of freedom of the standard error: Student's t with these gives the chance of a z."""
    sizes: str
    before: float
    after: float

    @property
    def z(self) -> float:
        if self.se > 0:
            return self.gain / self.se
        return math.inf if self.gain > 0 else 0.0

    def bound(self, min_z: float = MIN_Z) -> float:
        """The z a pass needs: `min_z`, or more where this estimate's few degrees of freedom need more."""
        return max(min_z, t_quantile(CHANCE, self.dof))

    def describe(self, min_z: float = MIN_Z, min_gain: float = 0.0) -> str:
        bound = self.bound(min_z)
        floor = f" and a gain of at least {min_gain}" if min_gain else ""
        return (f"{self.what}: {self.before:.3f} -> {self.after:.3f}, gain {self.gain:+.4f}, SE {self.se:.4f}, "
                f"z {self.z:.2f} ({self.dof:.0f} degrees of freedom) on {self.sizes}; learning needs z >= {bound:.2f}"
                f"{floor}, which a model that learns nothing reaches with probability {t_tail(bound, self.dof):.1e} "
                f"(this z: {_probability(t_tail(self.z, self.dof))})")  # fmt: skip


def _probability(p: float) -> str:
    return f"{p:.1e}" if p > 1e-300 else "under 1e-300"


def assert_learned(gain: Gain, min_z: float = MIN_Z, min_gain: float = 0.0) -> None:
    """Fails unless `gain` is at least `min_z` standard errors (and the t bound) and at least `min_gain`."""
    assert min_z >= MIN_Z, f"a learning test asks for at least {MIN_Z} standard errors"
    print(gain.describe(min_z, min_gain))
    assert gain.z >= gain.bound(min_z) and gain.gain >= min_gain, gain.describe(min_z, min_gain)


def difference_of_means(before: Sequence[float], after: Sequence[float], what: str) -> Gain:
    """Mean after less mean before, two independent samples; Welch's standard error and degrees of freedom."""
    a, b = statistics.variance(before) / len(before), statistics.variance(after) / len(after)
    dof = (
        (a + b) ** 2 / (a**2 / (len(before) - 1) + b**2 / (len(after) - 1))
        if a + b > 0
        else len(before) + len(after) - 2
    )
    mean_before, mean_after = statistics.mean(before), statistics.mean(after)
    return Gain(what, mean_after - mean_before, math.sqrt(a + b), dof, f"{len(before)} samples before and {len(after)} after",
                mean_before, mean_after)  # fmt: skip


def paired_difference(
    before: Mapping[Task, Sequence[float]], after: Mapping[Task, Sequence[float]], what: str
) -> Gain:  # fmt: skip
    """The mean over tasks of each task's mean after less its mean before; the SE of that mean over tasks."""
    tasks = sorted(set(before) & set(after), key=str)
    assert len(tasks) >= 2, f"{what}: {len(tasks)} tasks measured both before and after"
    differences = [statistics.mean(after[t]) - statistics.mean(before[t]) for t in tasks]
    samples = (sum(len(before[t]) for t in tasks), sum(len(after[t]) for t in tasks))
    return Gain(what, statistics.mean(differences), statistics.stdev(differences) / math.sqrt(len(tasks)), len(tasks) - 1,
                f"{len(tasks)} tasks ({samples[0]} samples before, {samples[1]} after)",
                statistics.mean(statistics.mean(before[t]) for t in tasks),
                statistics.mean(statistics.mean(after[t]) for t in tasks))  # fmt: skip


def trend(
    steps: Sequence[float],
    rewards: Sequence[float],
    what: str,
    tasks: Sequence[Hashable] | None = None,
) -> Gain:
    """The least-squares slope of reward on step times the steps spanned: the rise the run's rollouts show.

    With `tasks`, each task's own mean is taken out first (a fixed effect per task), so a task's difficulty counts
    as noise of no step even where tasks are not spread evenly over steps. When nothing is learned the policy stays
    put and its rollouts are independent given their task, which is what the standard error assumes."""
    tasks = tasks if tasks is not None else [None] * len(steps)
    members: defaultdict[Hashable, list[int]] = defaultdict(list)
    for index, task in enumerate(tasks):
        members[task].append(index)
    x, y = [0.0] * len(steps), [0.0] * len(steps)
    for indices in members.values():
        mean_x = statistics.mean(steps[i] for i in indices)
        mean_y = statistics.mean(rewards[i] for i in indices)
        for i in indices:
            x[i], y[i] = steps[i] - mean_x, rewards[i] - mean_y
    sxx = sum(v * v for v in x)
    slope = sum(u * v for u, v in zip(x, y, strict=True)) / sxx
    dof = len(steps) - len(members) - 1
    residual = sum((v - slope * u) ** 2 for u, v in zip(x, y, strict=True)) / dof
    first, last = min(steps), max(steps)
    start = statistics.mean(rewards) + slope * (first - statistics.mean(steps))
    return Gain(what, slope * (last - first), math.sqrt(residual / sxx) * (last - first), dof,
                f"{len(steps)} rollouts over steps {first:g} to {last:g}" + (f", {len(members)} tasks" if len(members) > 1 else ""),
                start, start + slope * (last - first))  # fmt: skip


@dataclass(frozen=True)
class RolloutReward:
    step: int
    """The training step the rollout was for, or the step a validation followed (0: before training)."""
    task: str
    reward: float


def run_rewards(assembler_address: str, run_id: str, kind: str) -> list[RolloutReward]:
    """A `parity.train` run's rewarded rollouts, read back from its assembler: kind "s", each training step's
    (sessions `{run_id}-s{step}-{batch}-{task}-r{n}-a{attempt}`), or "v", each validation's
    (`{run_id}-v{step}-{task}-r{n}-a{attempt}`)."""
    batch = r"-[0-9a-f]{4}" if kind == "s" else ""
    name = re.compile(rf"{re.escape(run_id)}-{kind}(\d{{5}}){batch}-(.+)-r\d+-a\d+")
    assembler, token, rewards = AssemblerClient(assembler_address), "", []
    while True:
        page = assembler.list_trajectories(
            assembler_pb.ListTrajectoriesRequest(page_size=1000, page_token=token)
        )
        for view in page.trajectories:
            if view.has_reward and (match := name.fullmatch(view.session_id)):
                rewards.append(RolloutReward(int(match[1]), match[2], view.reward))
        if not (token := page.next_page_token):
            return rewards


def t_tail(t: float, dof: float) -> float:
    """P(T >= t) for Student's t with `dof` degrees of freedom."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if t < 0:
        return 1.0 - t_tail(-t, dof)
    return 0.5 * _incomplete_beta(dof / 2, 0.5, dof / (dof + t * t))


def t_quantile(tail: float, dof: float) -> float:
    """The t with P(T >= t) = `tail`, by bisection."""
    low, high = 0.0, 1e3
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if t_tail(middle, dof) > tail else (low, middle)
    return high


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (Numerical Recipes, 6.4)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The incomplete beta function's continued fraction, by the modified Lentz method."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):  # fmt: skip
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return fraction

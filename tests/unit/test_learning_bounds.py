"""The learning tests' statistic: Student's t tail against its closed forms, each estimator on data whose answer
is known, and a failure that prints what a reader needs to judge it."""

from __future__ import annotations

import math
import random

import pytest

from tests.learning_bounds import (
    CHANCE,
    MIN_Z,
    assert_learned,
    difference_of_means,
    paired_difference,
    t_quantile,
    t_tail,
    trend,
)


@pytest.mark.parametrize("t", [0.0, 0.5, 3.1, 10.0])
def test_t_tail_matches_its_closed_forms_and_the_normal_limit(t: float) -> None:
    assert t_tail(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-12)
    assert t_tail(t, 2) == pytest.approx(0.5 * (1 - t / math.sqrt(2 + t * t)), abs=1e-12)
    assert t_tail(t, 1e7) == pytest.approx(0.5 * math.erfc(t / math.sqrt(2)), rel=1e-4)
    assert t_tail(-t, 5) == pytest.approx(1 - t_tail(t, 5), abs=1e-12)


def test_the_bound_is_the_normal_one_with_many_samples_and_higher_with_few() -> None:
    assert t_tail(MIN_Z, 1e9) < CHANCE
    assert t_quantile(CHANCE, 1e9) == pytest.approx(3.0902, abs=1e-3)
    assert t_quantile(CHANCE, 31) == pytest.approx(3.375, abs=1e-3)  # 32 paired tasks
    assert t_tail(t_quantile(CHANCE, 31), 31) == pytest.approx(CHANCE, rel=1e-6)


def test_each_estimator_finds_a_known_gain() -> None:
    means = difference_of_means([0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 1.0], "m")
    assert (means.gain, means.se, means.dof) == pytest.approx(
        (0.25, math.sqrt(1 / 12 + 1 / 16), 5.88), abs=1e-2
    )
    paired = paired_difference(
        {"a": [0.0, 0.0], "b": [1.0, 0.0], "c": [1.0]}, {"a": [1.0, 0.0], "b": [1.0, 1.0]}, "p"
    )
    assert (paired.gain, paired.se, paired.dof, paired.before, paired.after) == (
        0.5,
        0.0,
        1,
        0.25,
        0.75,
    )
    assert paired.z == math.inf, "only the tasks measured on both sides count"
    rng = random.Random(0)
    steps = [s for s in range(1, 11) for _ in range(20)]
    tasks = [n % 4 for n in range(len(steps))]
    rewards = [
        0.1 * task + 0.02 * step + rng.gauss(0, 0.05)
        for step, task in zip(steps, tasks, strict=True)
    ]
    rise = trend(steps, rewards, "t", tasks=tasks)
    assert rise.gain == pytest.approx(0.18, abs=3 * rise.se) and rise.dof == 200 - 4 - 1
    assert rise.se < 0.02


def test_a_gain_within_chance_fails_printing_gain_se_z_sizes_and_the_chance() -> None:
    rng = random.Random(1)
    before, after = [rng.random() for _ in range(64)], [rng.random() for _ in range(64)]
    with pytest.raises(AssertionError) as failed:
        assert_learned(difference_of_means(before, after, "served reward"))
    message = str(failed.value)
    for part in ("served reward", "gain", "SE", "z", "64 samples before and 64 after", "learning needs z >= 3.1",
                 "probability 1.0e-03"):  # fmt: skip
        assert part in message
    with pytest.raises(AssertionError, match="at least 3.1 standard errors"):
        assert_learned(difference_of_means(before, after, "served reward"), min_z=2)

"""The promotion gate reads the run's validations: step 0 is the serving model, the checkpoint's step the candidate."""

from __future__ import annotations

import math

import pytest

from parity.services.trainer.promotion.gate import judge
from parity.services.trainer.step_metrics import StepRecord


def validations(*steps: tuple[int, float]) -> list[StepRecord]:
    return [
        StepRecord("run-1", step, 0.0, {"pass@1": value, "reward": value / 2})
        for step, value in steps
    ]


def test_a_candidate_at_least_as_good_passes() -> None:
    result = judge(validations((0, 0.25), (4, 0.25)), 4, "pass@1", 0.0)
    assert result.passed and result.reason == ""
    assert (result.baseline, result.candidate) == (0.25, 0.25)


@pytest.mark.parametrize(
    ("candidate", "margin", "passed"), [(0.20, 0.05, True), (0.19, 0.05, False), (0.5, 0.0, True)]
)
def test_the_margin_is_how_far_below_the_serving_model_a_candidate_may_be(
    candidate: float, margin: float, passed: bool
) -> None:
    result = judge(validations((0, 0.25), (6, candidate)), 6, "pass@1", margin)
    assert result.passed is passed
    if not passed:
        assert (
            result.reason
            == "pass@1 0.19 at step 6 is below the serving model's 0.25 by 0.06, more than the margin 0.05"
        )


def test_a_worse_candidate_is_refused_on_the_metric_asked_for() -> None:
    records = validations((0, 0.4), (2, 0.2))
    assert not judge(records, 2, "pass@1", 0.0).passed
    assert not judge(records, 2, "reward", 0.0).passed
    assert judge(records, 2, "reward", 0.11).passed


def test_missing_validations_are_refused_naming_what_was_recorded() -> None:
    result = judge(validations((0, 0.4), (2, 0.5)), 4, "pass@1", 0.0)
    assert not result.passed and math.isnan(result.candidate)
    assert "no 'pass@1' at step 4" in result.reason and "validated steps: 0, 2" in result.reason
    assert "metrics: pass@1, reward" in result.reason
    no_baseline = judge(validations((3, 0.5)), 3, "pass@1", 0.0)
    assert not no_baseline.passed and "no validation of the serving model" in no_baseline.reason
    assert "validated steps: none" in judge([], 3, "pass@1", 0.0).reason
    assert "no 'pass@4'" in judge(validations((0, 0.1), (3, 0.5)), 3, "pass@4", 0.0).reason


def test_step_zero_is_the_serving_model_itself() -> None:
    result = judge(validations((0, 0.4)), 0, "pass@1", 0.0)
    assert not result.passed and "nothing to promote" in result.reason

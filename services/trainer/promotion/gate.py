"""The promotion gate: is a candidate no worse than the model that serves, by a margin?

Both numbers come from the run's own validations, which the driver measured with the
same agent, eval tasks and reward: step 0 scored the model the run started from, a later
step scored the policy after that many updates. The gate reads them; it never runs an
evaluation itself. That step 0 measured what serves is checked separately, by the probe
(see `serving`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from parity.services.trainer.step_metrics import StepRecord

DEFAULT_METRIC = "pass@1"


@dataclass(frozen=True)
class GateResult:
    passed: bool
    metric: str
    baseline: float
    """The serving model's value: the run's validation at step 0; NaN when missing."""
    candidate: float
    """The candidate's value: the validation at its checkpoint's step; NaN when missing."""
    margin: float
    reason: str
    """Why it was refused; empty when it passed."""


def judge(validations: Sequence[StepRecord], step: int, metric: str, margin: float) -> GateResult:
    """Compare the validation at `step` with the one at step 0 on `metric`."""
    by_step = {record.step: record.values for record in validations}
    baseline = by_step.get(0, {}).get(metric, math.nan)
    candidate = by_step.get(step, {}).get(metric, math.nan)

    def refused(reason: str) -> GateResult:
        return GateResult(False, metric, baseline, candidate, margin, reason)

    if step == 0:
        return refused(
            "the checkpoint is at step 0: it is the model that serves, there is nothing to promote"
        )
    for name, at, value in (("the serving model", 0, baseline), ("the candidate", step, candidate)):
        if math.isnan(value):
            known = sorted({key for values in by_step.values() for key in values})
            steps = ", ".join(str(s) for s in sorted(by_step)) or "none"
            return refused(
                f"no validation of {name}: the run recorded no {metric!r} at step {at} (validated steps: {steps}; "
                f"metrics: {', '.join(known) or 'none'}); validate at step 0 and at the checkpoint's step"
            )
    if candidate < baseline - margin:
        return refused(
            f"{metric} {candidate:.4g} at step {step} is below the serving model's {baseline:.4g} by "
            f"{baseline - candidate:.4g}, more than the margin {margin:g}"
        )
    return GateResult(True, metric, baseline, candidate, margin, "")

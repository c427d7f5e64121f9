"""How the SDK reads and says a promotion decision: what `parity trainer promote` prints."""

from __future__ import annotations

import math
from typing import Any

from parity.api.trainer.v1 import promotion_pb2
from parity.promotion import Promotion


def decision(outcome: promotion_pb2.PromotionOutcome, **fields: Any) -> Promotion:
    message = promotion_pb2.Promotion(promotion_id="promotion-000002", outcome=outcome, run_id="run-1",
                                      checkpoint_id="run-1/step-000003", metric="pass@1", **fields)  # fmt: skip
    return Promotion.from_proto(message)


def test_each_outcome_says_what_users_get() -> None:
    promoted = decision(
        promotion_pb2.PROMOTION_OUTCOME_PROMOTED,
        policy_version=5,
        baseline=0.125,
        candidate=0.734375,
    )
    assert promoted.promoted and promoted.outcome == "promoted"
    assert str(promoted) == ("promotion-000002: promoted checkpoint run-1/step-000003: pass@1 0.7344 against the "
                             "serving model's 0.125 (margin 0); users get policy version 5")  # fmt: skip
    canary = decision(
        promotion_pb2.PROMOTION_OUTCOME_CANARY,
        policy_version=6,
        baseline=0.2,
        candidate=0.3,
        canary_share=0.1,
    )
    assert not canary.promoted and str(canary).endswith(
        "10% of sessions get policy version 6 from the trainer's replicas"
    )
    rolled = decision(
        promotion_pb2.PROMOTION_OUTCOME_ROLLED_BACK,
        policy_version=7,
        reason="took back promotion-000001",
    )
    assert (
        str(rolled)
        == "promotion-000002: rolled back; took back promotion-000001; users get policy version 7"
    )


def test_a_refusal_names_its_reason_even_without_numbers() -> None:
    missing = decision(promotion_pb2.PROMOTION_OUTCOME_REFUSED, baseline=0.4, candidate=math.nan,
                       reason="no validation of the candidate")  # fmt: skip
    assert not missing.promoted and missing.outcome == "refused"
    assert (
        str(missing)
        == "promotion-000002: refused checkpoint run-1/step-000003 (pass@1): no validation of the candidate"
    )
    worse = decision(
        promotion_pb2.PROMOTION_OUTCOME_REFUSED,
        baseline=0.4,
        candidate=0.3,
        margin=0.05,
        reason="below",
    )
    assert "(pass@1 0.3 against the serving model's 0.4 (margin 0.05)): below" in str(worse)

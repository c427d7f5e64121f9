"""The promotion log: every decision kept, rollbacks walking back through the standing promotions."""

from __future__ import annotations

import math

from parity.services.trainer.promotion.log import (
    CANARY,
    PROMOTED,
    REFUSED,
    ROLLED_BACK,
    PromotionLog,
    PromotionRecord,
    ServedPolicy,
)


def served(name: str) -> ServedPolicy:
    return ServedPolicy(
        "run-1", name, f"/serving/{name}", False, [1, 2, 3], [-1.5, -2.25], "float32"
    )


def record(
    log: PromotionLog, outcome: str, version: int, name: str = "", served_model: str = ""
) -> PromotionRecord:
    return log.append(PromotionRecord(
        log.next_id(), outcome, "run-1", name, version, "pass@1", 0.25, math.nan, 0.0, "", 1.0,
        served=served(name) if outcome != REFUSED else None, replaced=served(f"before-{name}") if outcome == PROMOTED else None,
        served_model=served_model,
    ))  # fmt: skip


def test_records_survive_a_restart_exactly(tmp_path) -> None:
    log = PromotionLog(tmp_path)
    first = record(log, PROMOTED, 3, "a")
    refusal = record(log, REFUSED, 0, "b")
    again = PromotionLog(tmp_path).records()
    assert [r.promotion_id for r in again] == ["promotion-000001", "promotion-000002"]
    assert again[0].to_json() == first.to_json() and again[0].served == served("a")
    assert (
        again[1].served is None
        and math.isnan(again[1].candidate)
        and again[1].promotion_id == refusal.promotion_id
    )


def test_rollbacks_pop_the_standing_promotions_in_turn(tmp_path) -> None:
    log = PromotionLog(tmp_path)
    assert log.standing() == [] and log.highest_policy_version() == 0
    record(log, PROMOTED, 3, "a")
    record(log, REFUSED, 0, "x")
    record(log, PROMOTED, 5, "b")
    assert [r.checkpoint_id for r in log.standing()] == ["a", "b"]
    record(log, ROLLED_BACK, 6, "before-b")
    assert [r.checkpoint_id for r in log.standing()] == ["a"]
    record(log, ROLLED_BACK, 7, "before-a")
    assert log.standing() == []
    assert log.highest_policy_version() == 7
    assert (
        served("a").pushed().folder is not None
        and ServedPolicy("r", "", "", False, [], [], "float32").pushed().folder is None
    )


def test_each_served_model_has_its_own_standing_promotions_and_none_holds_the_canary(
    tmp_path,
) -> None:
    log = PromotionLog(tmp_path)
    record(log, PROMOTED, 3, "everyone")
    record(log, CANARY, 4, "canary")
    for name, version in (("acme-1", 5), ("globex-1", 6), ("acme-2", 7)):
        record(log, PROMOTED, version, name, served_model=name.split("-")[0])
    assert [r.checkpoint_id for r in log.standing("acme")] == ["acme-1", "acme-2"]
    assert [r.checkpoint_id for r in log.standing("globex")] == ["globex-1"]
    assert [r.checkpoint_id for r in log.standing()] == ["everyone"]
    canary = log.running_canary()
    assert canary is not None and canary.checkpoint_id == "canary", (
        "a tenant's promotion does not end the canary"
    )
    record(log, ROLLED_BACK, 8, "before-acme-2", served_model="acme")
    assert [r.checkpoint_id for r in log.standing("acme")] == ["acme-1"]
    assert [r.checkpoint_id for r in log.standing("globex")] == ["globex-1"]
    assert PromotionLog(tmp_path).records()[-1].served_model == "acme"

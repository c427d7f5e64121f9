"""The production example's simulated population: reproducible, and with the shares asked for."""

from __future__ import annotations

from examples.production.loop import COHORTS, FULL
from examples.production.users import Population


def test_a_population_is_the_same_for_a_seed_and_has_about_the_asked_shares() -> None:
    population = Population(400, feedback_share=0.75, deletion_share=0.1, seed=3)
    people = population.people()
    assert people == population.people() and len({user for user, _, _ in people}) == 400
    raters = sum(rates for _, rates, _ in people) / 400
    leavers = sum(leaves for _, _, leaves in people) / 400
    assert 0.70 < raters < 0.80 and 0.06 < leavers < 0.14
    assert people != Population(400, 0.75, 0.1, seed=4).people()


def test_the_full_loop_has_sessions_enough_for_both_candidates() -> None:
    # Expected rated sessions of living users per cohort, against what each run's steps adopt.
    kept = 0.75 * 0.9
    share_a = COHORTS.count("cohort-a") / len(COHORTS)
    per_step = FULL.groups_per_batch * FULL.rollouts_per_task
    assert FULL.traffic_before * share_a * kept >= FULL.candidate_steps * per_step
    assert FULL.traffic_before * (1 - share_a) * kept >= 0.75 * FULL.worse_steps * per_step


def test_each_tenant_has_sessions_enough_for_its_run() -> None:
    from examples.production.loop import TENANT_SCALE
    from examples.production.tenants import tenant_names

    scale, tenants = TENANT_SCALE[FULL], tenant_names(2)
    kept = 0.75 * 0.9
    per_step = scale.groups_per_batch * scale.rollouts_per_task
    assert scale.traffic_before / len(tenants) * kept >= scale.candidate_steps * per_step

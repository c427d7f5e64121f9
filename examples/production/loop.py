"""The production loop on this machine, end to end, measured: deploy, serve users, train from their
feedback, gate, promote.

    make production            # python -m examples.production.loop

1. A deployment (`deployment.py`) of the default model: users' traffic on serving replicas, a
   trainer with replicas of its own.
2. Simulated users (`users.py`) ask the calculator agent word problems; live success is measured.
   Most rate their answers, late; some never do; a few ask for their data to be deleted.
3. A deliberately worse candidate: trained from the store on one cohort's sessions with the
   feedback inverted (`thumbs_down` rewarded). The gate must refuse it.
4. The candidate: trained from the store on the other cohort with the feedback as given, gated,
   and promoted into the serving replicas by the verified push.
5. Users ask again; live success is measured on the promoted policy.

It prints a table and writes `results.json` in the data folder, which it empties first. `--quick` runs a small
version (fewer users, one step each) that checks the loop works, not that it learns. `--tenants N` runs the loop
for N tenants on one deployment instead, each trained, gated and served its own LoRA adapter (`tenants.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import parity
from examples.production.deployment import SERVED_NAME, Deployment
from examples.production.tenants import print_tenants, run_summary, run_tenants, tenants_decided
from examples.production.users import Population, Visit, rate_late, traffic
from parity.training.tasks import load_tasks
from parity.user_data import trained_on

HERE = Path(__file__).resolve().parent
CALCULATOR = HERE.parent / "calculator"
COHORTS = (
    "cohort-a",
    "cohort-a",
    "cohort-a",
    "cohort-a",
    "cohort-a",
    "cohort-b",
    "cohort-b",
    "cohort-b",
)
"""Five of every eight sessions to the candidate's cohort, three to the worse one's."""


@dataclass(frozen=True)
class Scale:
    users: int
    traffic_before: int
    traffic_after: int
    candidate_steps: int
    worse_steps: int
    groups_per_batch: int
    rollouts_per_task: int
    val_tasks: int
    val_samples: int


FULL = Scale(users=32, traffic_before=128, traffic_after=96, candidate_steps=3, worse_steps=2, groups_per_batch=2,
             rollouts_per_task=8, val_tasks=32, val_samples=2)  # fmt: skip
QUICK = Scale(users=8, traffic_before=24, traffic_after=8, candidate_steps=1, worse_steps=1, groups_per_batch=1,
              rollouts_per_task=4, val_tasks=4, val_samples=1)  # fmt: skip
# With tenants, each tenant's run has only its own users' rated sessions to train on, and enough users that
# each tenant's share who rate stays near the population's.
TENANT_SCALE = {
    FULL: replace(FULL, users=64, traffic_before=192),
    QUICK: replace(QUICK, traffic_before=32, traffic_after=16),
}


def train_candidate(
    deployment: Deployment, scale: Scale, cohort: str, weights: str, steps: int, out: Path
) -> parity.TrainResult:
    """A from-store run on one cohort's rated sessions, validated and then put to the gate."""
    val_tasks = load_tasks(str(CALCULATOR / "val_tasks.jsonl"))[: scale.val_tasks]
    return parity.train(
        "examples.calculator.agent:solve", val_tasks=val_tasks, model=str(deployment.model_path),
        stack=deployment.training_stack(), from_store=True,
        store_tags=cohort, feedback_weights=weights, store_idle_minutes=0.05, steps=steps,
        groups_per_batch=scale.groups_per_batch, rollouts_per_task=scale.rollouts_per_task, max_tokens=16,
        val_samples=scale.val_samples, promote=True, output_dir=str(out), progress=False,
    )  # fmt: skip


def success(visits: list[Visit]) -> float:
    return sum(v.correct for v in visits) / len(visits) if visits else float("nan")


def run(data_dir: Path, scale: Scale, seed: int) -> dict[str, Any]:
    started = time.monotonic()
    tasks = load_tasks(str(CALCULATOR / "tasks.jsonl"))
    shutil.rmtree(
        data_dir, ignore_errors=True
    )  # a fresh deployment: no sessions, runs or promotions from before
    with Deployment(data_dir) as deployment:
        parity.configure(
            ingest_url=deployment.users_url(), store_address=deployment.training_stack().store
        )
        people = Population(
            scale.users, feedback_share=0.75, deletion_share=0.1, seed=seed
        ).people()
        users = [user for user, _, _ in people]
        raters = {user for user, rates, _ in people if rates}
        leavers = sorted(user for user, _, leaves in people if leaves)
        deployed_s = time.monotonic() - started

        before = asyncio.run(
            traffic(tasks[: scale.traffic_before], users, COHORTS, SERVED_NAME, 16, seed)
        )
        signals = rate_late(before, raters, seed)
        deleted = {user: parity.delete_user_data(user).sessions for user in leavers}

        worse = train_candidate(
            deployment,
            scale,
            "cohort-b",
            "thumbs_up=0,thumbs_down=1",
            scale.worse_steps,
            data_dir / "runs",
        )
        candidate = train_candidate(deployment, scale, "cohort-a", "thumbs_up=1,thumbs_down=0", scale.candidate_steps,
                                    data_dir / "runs")  # fmt: skip

        after = asyncio.run(
            traffic(tasks[: scale.traffic_after], users, ("prod-after",), SERVED_NAME, 16, seed + 1)
        )
        trained_leavers = {
            user: len(trained_on(user, trainer_address=deployment.trainer_address))
            for user in leavers
        }
    results = {
        "live_success_before": round(success(before), 3), "live_success_after": round(success(after), 3),
        "sessions_before": len(before), "sessions_after": len(after),
        "rated_sessions": signals, "unrated_sessions": len(before) - signals,
        "deleted_users": len(leavers), "deleted_sessions": sum(deleted.values()),
        "steps_with_a_deleted_users_session": sum(trained_leavers.values()),
        "worse": run_summary(worse), "candidate": run_summary(candidate),
        "deploy_seconds": round(deployed_s, 1), "wall_seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip
    (data_dir / "results.json").write_text(json.dumps(results, indent=2))
    return results


def print_table(results: dict[str, Any]) -> None:
    worse, candidate = results["worse"], results["candidate"]
    rows = [
        (
            "live success before promotion",
            f"{results['live_success_before']:.3f} ({results['sessions_before']} sessions)",
        ),
        (
            "live success after promotion",
            f"{results['live_success_after']:.3f} ({results['sessions_after']} sessions)",
        ),
        (
            "sessions rated late / never rated",
            f"{results['rated_sessions']} / {results['unrated_sessions']}",
        ),
        (
            "users deleted (their sessions)",
            f"{results['deleted_users']} ({results['deleted_sessions']})",
        ),
        (
            "steps that trained a deleted user's session",
            str(results["steps_with_a_deleted_users_session"]),
        ),
    ]
    for name, summary in (("worse candidate (inverted feedback)", worse), ("candidate", candidate)):
        rows.append(
            (f"{name}: held-out pass@1", f"{summary['pass@1_before']} -> {summary['pass@1_after']}")
        )
        rows.append((f"{name}: sessions", json.dumps(summary["store_sessions"])))
        rows.append((f"{name}: gate", summary["promotion"] or summary["error"]))
    rows.append(
        (
            "wall time",
            f"{results['wall_seconds'] / 60:.1f} min (deployment {results['deploy_seconds']:.0f} s)",
        )
    )
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.production.loop", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--data-dir", type=Path, default=Path(".parity/production"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick", action="store_true", help="a small loop that checks the wiring, not the learning"
    )
    parser.add_argument("--tenants", type=int, default=0,
                        help="this many tenants on one deployment, each trained, gated and served its own LoRA adapter")  # fmt: skip
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    if args.tenants:
        if args.tenants < 2:
            parser.error(f"--tenants must be at least 2, got {args.tenants}")
        results = run_tenants(args.data_dir.resolve(), TENANT_SCALE[scale], args.seed, args.tenants)
        print_tenants(results)
        return 0 if tenants_decided(results) else 1
    results = run(args.data_dir.resolve(), scale, args.seed)
    print_table(results)
    refused = ": refused " in results["worse"]["promotion"]
    promoted = ": promoted " in results["candidate"]["promotion"]
    return 0 if refused and promoted and results["steps_with_a_deleted_users_session"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

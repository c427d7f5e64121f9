"""The production loop with several tenants on one deployment: each trained from its own users' sessions, gated
on its own, and served its own adapter.

    python -m examples.production.loop --tenants 2

Each tenant is a tag on its users' sessions and a model name its agents ask for
(`assistant-TENANT`). One deployment serves them all: one base model in each vLLM, a
LoRA adapter per tenant beside it. The steps:

1. Users of every tenant ask word problems; most rate their answers late, a few ask for
   their data to be deleted.
2. One from-store LoRA run per tenant, on that tenant's rated sessions only, all at once on
   the one trainer (`--max-concurrent-runs`), each `parity.train` in a thread of its own.
3. Each run's last checkpoint goes to the gate with `promote_model` set to its tenant's name:
   a pass serves the adapter to that tenant's users only; every other user keeps what they had.
4. Users ask again; live success is measured per tenant, on whatever serves each now.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import parity
from examples.production.deployment import SERVED_NAME, TENANT_LORA_RANK, Deployment, tenant_model
from examples.production.users import Population, Visit, rate_late, traffic
from parity.api.ingest.v1 import ingest_service_pb2 as ingest_pb
from parity.clients import IngestClient
from parity.training.tasks import load_tasks
from parity.user_data import trained_on

if TYPE_CHECKING:
    from examples.production.loop import Scale

HERE = Path(__file__).resolve().parent
CALCULATOR = HERE.parent / "calculator"
# An adapter moves less per step than the whole model at the tutorial's rate (docs/training.md, LoRA).
LEARNING_RATE = 5e-4


def tenant_names(count: int) -> list[str]:
    return [f"tenant-{chr(ord('a') + index)}" for index in range(count)]


def train_tenant(
    deployment: Deployment, scale: Scale, tenant: str, out: Path
) -> parity.TrainResult:
    """A from-store LoRA run on one tenant's rated sessions, validated, then put to the gate for that tenant."""
    val_tasks = load_tasks(str(CALCULATOR / "val_tasks.jsonl"))[: scale.val_tasks]
    return parity.train(
        "examples.calculator.agent:solve", val_tasks=val_tasks, model=str(deployment.model_path),
        stack=deployment.training_stack(), from_store=True, store_tags=tenant,
        feedback_weights="thumbs_up=1,thumbs_down=0", store_idle_minutes=0.05, steps=scale.candidate_steps,
        groups_per_batch=scale.groups_per_batch, rollouts_per_task=scale.rollouts_per_task, max_tokens=16,
        val_samples=scale.val_samples, lora_rank=TENANT_LORA_RANK, learning_rate=LEARNING_RATE,
        promote=True, promote_model=tenant_model(tenant), output_dir=str(out), progress=False,
    )  # fmt: skip


def run_tenants(data_dir: Path, scale: Scale, seed: int, count: int) -> dict[str, Any]:
    started = time.monotonic()
    tasks = load_tasks(str(CALCULATOR / "tasks.jsonl"))
    tenants = tenant_names(count)
    shutil.rmtree(data_dir, ignore_errors=True)  # a fresh deployment, as the single loop's
    with Deployment(data_dir, tenants=count) as deployment:
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

        before = asyncio.run(_visits(tasks[: scale.traffic_before], users, tenants, seed))
        signals = rate_late(before, raters, seed)
        deleted = {user: parity.delete_user_data(user).sessions for user in leavers}

        with ThreadPoolExecutor(len(tenants)) as threads:
            runs = dict(zip(tenants, threads.map(
                lambda tenant: train_tenant(deployment, scale, tenant, data_dir / "runs"), tenants), strict=True))  # fmt: skip

        after = asyncio.run(_visits(tasks[: scale.traffic_after], users, tenants, seed + 1))
        routes = (
            IngestClient(deployment.services["users-ingest"].address)
            .get_stats(ingest_pb.GetStatsRequest())
            .routes
        )
        trained_leavers = {
            user: len(trained_on(user, trainer_address=deployment.trainer_address))
            for user in leavers
        }
    results = {
        "tenants": {
            tenant: {
                "model": tenant_model(tenant),
                "live_success_before": _success(before, tenant), "live_success_after": _success(after, tenant),
                "sessions_before": sum(v.cohort == tenant for v in before),
                "sessions_after": sum(v.cohort == tenant for v in after),
                "run": run_summary(runs[tenant]),
                "served_adapter": next((r.lora_adapter for r in routes if r.policy_model == tenant_model(tenant)), ""),
            }
            for tenant in tenants
        },
        "rated_sessions": signals, "deleted_users": len(leavers), "deleted_sessions": sum(deleted.values()),
        "steps_with_a_deleted_users_session": sum(trained_leavers.values()),
        "deploy_seconds": round(deployed_s, 1), "wall_seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip
    (data_dir / "results.json").write_text(json.dumps(results, indent=2))
    return results


async def _visits(
    tasks: list[dict[str, Any]], users: list[str], tenants: list[str], seed: int
) -> list[Visit]:
    """Every tenant's users at once, each user one tenant's (so a deletion reaches one tenant's data), and each
    tenant's agents asking for its own model."""
    count = len(tenants)
    per_tenant = await asyncio.gather(*(
        traffic(tasks[index::count], users[index::count], (tenant,), SERVED_NAME, 16 // count, seed,
                {tenant: tenant_model(tenant)})
        for index, tenant in enumerate(tenants)
    ))  # fmt: skip
    return [visit for visits in per_tenant for visit in visits]


def _success(visits: list[Visit], tenant: str) -> float:
    mine = [v for v in visits if v.cohort == tenant]
    return round(sum(v.correct for v in mine) / len(mine), 3) if mine else float("nan")


def run_summary(result: parity.TrainResult) -> dict[str, Any]:
    """What the loop reports of a candidate's run."""
    return {
        "run_id": result.run_id, "state": result.state, "error": result.error, "steps": result.steps,
        "pass@1_before": result.val_pass_before.get("pass@1"), "pass@1_after": result.val_pass_after.get("pass@1"),
        "store_sessions": result.store_sessions, "promotion": result.promotion, "wall_seconds": result.wall_seconds,
    }  # fmt: skip


def print_tenants(results: dict[str, Any]) -> None:
    rows: list[tuple[str, str]] = []
    for tenant, measured in results["tenants"].items():
        run = measured["run"]
        rows += [
            (f"{tenant}: live success before / after", f"{measured['live_success_before']:.3f} / "
             f"{measured['live_success_after']:.3f} ({measured['sessions_before']} / {measured['sessions_after']} sessions)"),
            (f"{tenant}: held-out pass@1", f"{run['pass@1_before']} -> {run['pass@1_after']} ({run['wall_seconds']} s)"),
            (f"{tenant}: gate", run["promotion"] or run["error"]),
            (f"{tenant}: {measured['model']} served by", measured["served_adapter"] or "the base model"),
        ]  # fmt: skip
    rows += [
        (
            "users deleted (their sessions)",
            f"{results['deleted_users']} ({results['deleted_sessions']})",
        ),
        (
            "steps that trained a deleted user's session",
            str(results["steps_with_a_deleted_users_session"]),
        ),
        (
            "wall time",
            f"{results['wall_seconds'] / 60:.1f} min (deployment {results['deploy_seconds']:.0f} s)",
        ),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


def tenants_decided(results: dict[str, Any]) -> bool:
    """Every tenant's run completed and its gate decided; a promoted one serves that tenant's adapter."""
    for measured in results["tenants"].values():
        run = measured["run"]
        promoted = ": promoted " in run["promotion"]
        if run["state"] != "completed" or not (promoted or ": refused " in run["promotion"]):
            return False
        if promoted and measured["served_adapter"] != measured["model"]:
            return False
    return results["steps_with_a_deleted_users_session"] == 0

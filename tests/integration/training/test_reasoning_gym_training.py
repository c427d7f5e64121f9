"""`parity train --tasks reasoning-gym:NAME` as a user runs it: no agent and no task file, only a generator's name.

The run generates its training and held-out tasks, asks each question with the single-call agent, scores
each reply with the generator's scorer, trains, and validates before and after on the held-out tasks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]


def test_a_generators_name_is_enough_to_train_and_validate(tmp_path) -> None:
    runs = tmp_path / "runs"
    # Sums of two one-digit numbers, so that the generated model's digits are sometimes the answer
    # (or hold it, which reasoning-gym's scorer gives part credit for) and rewards vary within a group.
    # Few of its replies hold a number (in CI, 8 rollouts of 16 tokens varied in 1 group of 18), so each
    # rollout writes 48 tokens, 16 to a group, and a step may look through 36 tasks (4 groups, 8 extra
    # each) for one that varies. A learning rate far below the generated model's own keeps its replies as
    # random at step 2 as at step 1: at its own 1e-3 one step left it writing no digits, every group 0.
    # (tests/unit/training/test_reasoning_gym_tasks.py has the rate a run on a suite defaults to.)
    finished = subprocess.run(
        [sys.executable, "-m", "parity.cli", "train", "--no-progress",
         "--tasks", "reasoning-gym:basic_arithmetic",
         "--suite-options", 'max_terms=2,max_digits=1,operators=["+"],allow_negation=false',
         "--suite-size", "16", "--suite-val-size", "4", "--model", "tiny-test",
         "--steps", "2", "--groups-per-batch", "4", "--rollouts-per-task", "16", "--max-tokens", "48",
         "--learning-rate", "1e-6",
         "--checkpoint-interval", "0", "--no-export", "--output-dir", str(runs), "--run-id", "rg"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=840,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    assert (result["state"], result["steps"]) == ("completed", 2), result
    assert "pass@1" in result["val_pass_before"] and "pass@1" in result["val_pass_after"]

    run_dir = runs / "rg"
    saved = json.loads((run_dir / "settings.json").read_text())
    assert saved["tasks"] == "reasoning-gym:basic_arithmetic"
    assert saved["suite_options"]["operators"] == ["+"]
    # The held-out tasks are kept in the run folder, so a resume validates on the same ones.
    held_out = [json.loads(line) for line in Path(saved["val_tasks"]).read_text().splitlines()]
    assert len(held_out) == 4
    assert {task["reasoning_gym"]["generator"] for task in held_out} == {"basic_arithmetic"}
    validations = [
        row
        for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
        if row["kind"] == "validation"
    ]
    assert [row["step"] for row in validations] == [0, 2]
    assert all(row["failed"] == 0 for row in validations), validations

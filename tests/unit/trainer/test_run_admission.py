"""Which runs may train at once: LoRA runs on one base, up to max_concurrent_runs, each refused with its reason."""

from pathlib import Path

import pytest

from parity.services.runtime.errors import FailedPrecondition, ResourceExhausted
from parity.services.trainer.run_admission import check_admission
from parity.services.trainer.run_settings import RunSettings
from parity.services.trainer.run_status import RunState, RunStatus


def settings(model: Path, lora_rank: int = 8) -> RunSettings:
    return RunSettings(model, 4, groups_per_batch=1, lora_rank=lora_rank, learning_rate=1e-4)


def active(run_id: str, model: Path, lora_rank: int = 8) -> RunStatus:
    return RunStatus(run_id, settings(model, lora_rank), state=RunState.TRAINING)


def test_lora_runs_on_one_base_start_beside_each_other_up_to_the_limit(tmp_path) -> None:
    runs = [active("a", tmp_path), active("b", tmp_path)]
    check_admission(settings(tmp_path), "cpu", runs, limit=3)
    check_admission(settings(tmp_path, lora_rank=0), "cpu", [], limit=3)
    with pytest.raises(
        ResourceExhausted, match=r"max_concurrent_runs is 2 and 2 runs are active \(a, b\)"
    ):
        check_admission(settings(tmp_path), "cpu", runs, limit=2)


@pytest.mark.parametrize(
    ("new", "backend", "running", "reason"),
    [
        (
            "full",
            "cpu",
            "lora",
            "a full-model run changes the base model that the active runs \\(a\\) share",
        ),
        ("lora", "cpu", "full", "run a trains the whole model"),
        ("lora", "fsdp", "lora", "this run's backend is fsdp, which trains one run at a time"),
        ("other-base", "cpu", "lora", "runs at once share one base model, and this one asks for"),
    ],
)
def test_a_run_that_cannot_share_the_base_is_refused_with_the_reason(
    tmp_path, new, backend, running, reason
) -> None:
    model = tmp_path / "other" if new == "other-base" else tmp_path
    with pytest.raises(FailedPrecondition, match=reason):
        check_admission(settings(model, 0 if new == "full" else 8), backend,
                        [active("a", tmp_path, 0 if running == "full" else 8)], limit=4)  # fmt: skip


def test_one_run_at_a_time_by_default(tmp_path) -> None:
    check_admission(settings(tmp_path), "fsdp", [], limit=1)
    with pytest.raises(FailedPrecondition, match="run a is training; stop it first"):
        check_admission(settings(tmp_path), "cpu", [active("a", tmp_path)], limit=1)

from pathlib import Path

import pytest

from parity.services.runtime.errors import NotFound
from parity.services.trainer import checkpoints
from parity.services.trainer.run_settings import RunSettings

SETTINGS = RunSettings(Path("/m"), 10, groups_per_batch=2)


def write(root: Path, run_id: str, step: int) -> Path:
    final = checkpoints.checkpoint_path(root, run_id, step)
    staging = final.with_name(final.name + ".partial")
    staging.mkdir(parents=True)
    checkpoints.write_manifest(staging, run_id, step, step + 7, SETTINGS)
    checkpoints.commit(staging, final)
    return final


def test_lists_newest_first_per_run_and_skips_unfinished_writes(tmp_path) -> None:
    write(tmp_path, "run-a", 1)
    write(tmp_path, "run-a", 2)
    write(tmp_path, "run-b", 1)
    unfinished = checkpoints.checkpoint_path(tmp_path, "run-a", 3).with_name("step-000003.partial")
    unfinished.mkdir()
    checkpoints.write_manifest(unfinished, "run-a", 3, 10, SETTINGS)
    listed = checkpoints.list_checkpoints(tmp_path, "run-a")
    assert [(c.checkpoint_id, c.policy_version) for c in listed] == [
        ("run-a/step-000002", 9),
        ("run-a/step-000001", 8),
    ]
    assert len(checkpoints.list_checkpoints(tmp_path)) == 3
    assert listed[0].settings == SETTINGS


def test_finds_by_id_and_refuses_ids_outside_the_root(tmp_path) -> None:
    write(tmp_path, "run-a", 4)
    assert checkpoints.find_checkpoint(tmp_path, "run-a/step-000004").step == 4
    for bad in ("run-a/step-000005", "../etc", "/tmp"):
        with pytest.raises(NotFound):
            checkpoints.find_checkpoint(tmp_path, bad)

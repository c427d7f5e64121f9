"""What `parity train`'s settings ask of the trainer (the RunConfig) and of the local stack (`parity up`)."""

from __future__ import annotations

from pathlib import Path

from parity.services.trainer.run_settings import RunSettings
from parity.training import Trainer
from parity.training.local_stack import LocalStack
from parity.training.settings import TrainSettings

TASKS = [{"id": "t0", "prompt": "hi"}]


def run_settings(tmp_path: Path, **values: object) -> RunSettings:
    (tmp_path / "config.json").write_text("{}")
    trainer = Trainer(lambda task: 1.0, TASKS, steps=3, output_dir=str(tmp_path), model=str(tmp_path), **values)
    return RunSettings.from_proto(trainer._run_config())


def up_flag(stack: LocalStack, flag: str) -> str:
    command = stack.command()
    return command[command.index(flag) + 1]


def test_dtype_sets_what_the_trainer_computes_in_and_what_the_local_vllm_serves(tmp_path) -> None:
    assert run_settings(tmp_path).dtype == "float32"
    assert run_settings(tmp_path, dtype="bfloat16").dtype == "bfloat16"
    assert up_flag(LocalStack.for_run(tmp_path, TrainSettings()), "--vllm-dtype") == "float32"
    assert up_flag(LocalStack.for_run(tmp_path, TrainSettings(dtype="bfloat16")), "--vllm-dtype") == "bfloat16"

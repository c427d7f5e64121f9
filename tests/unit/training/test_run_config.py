"""What `parity train`'s settings ask of the trainer (the RunConfig) and of the local stack (`parity up`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parity.services.trainer.run_settings import RunSettings
from parity.training import Trainer
from parity.training.local_stack import LocalStack
from parity.training.settings import SettingsError, TrainSettings

TASKS: list[dict[str, Any]] = [{"id": "t0", "prompt": "hi"}]


def run_settings(tmp_path: Path, **values: Any) -> RunSettings:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    trainer = Trainer(
        lambda task: 1.0, TASKS, steps=3, output_dir=str(tmp_path), model=str(tmp_path), **values
    )
    return RunSettings.from_proto(trainer._run_config())


def up_flag(stack: LocalStack, flag: str) -> str:
    command = stack.command()
    return command[command.index(flag) + 1]


def test_dtype_sets_what_the_trainer_computes_in_and_what_the_local_vllm_serves(tmp_path) -> None:
    assert run_settings(tmp_path).dtype == "float32"
    assert run_settings(tmp_path, dtype="bfloat16").dtype == "bfloat16"
    assert (
        up_flag(LocalStack.for_run(tmp_path, TrainSettings(), tmp_path), "--vllm-dtype")
        == "float32"
    )
    assert (
        up_flag(
            LocalStack.for_run(tmp_path, TrainSettings(dtype="bfloat16"), tmp_path), "--vllm-dtype"
        )
        == "bfloat16"
    )


def test_lora_settings_ask_for_an_adapter_and_a_vllm_that_serves_adapters(tmp_path) -> None:
    assert not run_settings(tmp_path).lora_rank
    assert (
        "--vllm-lora-rank" not in LocalStack.for_run(tmp_path, TrainSettings(), tmp_path).command()
    )
    lora = run_settings(
        tmp_path, lora_rank=8, lora_target_modules="q_proj, v_proj", lora_dropout=0.05
    )
    assert (lora.lora_rank, lora.lora_alpha, lora.lora_target_modules, lora.lora_dropout) == (
        8,
        16,
        "q_proj,v_proj",
        0.05,
    )
    assert (
        up_flag(
            LocalStack.for_run(tmp_path, TrainSettings(lora_rank=8), tmp_path), "--vllm-lora-rank"
        )
        == "8"
    )


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"lora_rank": -1}, "lora_rank"),
        ({"lora_rank": 8, "lora_dropout": 1.5}, "lora_dropout"),
        ({"lora_rank": 8, "lora_target_modules": "q_proj,,v_proj"}, "lora_target_modules"),
        ({"lora_merge": True}, "lora_merge"),
    ],
)
def test_bad_lora_settings_are_refused_naming_the_key(values, key) -> None:
    with pytest.raises(SettingsError) as refused:
        TrainSettings(**values)
    assert refused.value.key == key


def test_a_teachers_replicas_reach_the_trainer_in_order_and_a_list_names_servers_only(
    tmp_path,
) -> None:
    settings = run_settings(tmp_path, teacher="http://t0:8000, http://t1:8000", reward_coef=0.0)
    assert settings.teacher_urls == ["http://t0:8000", "http://t1:8000"]
    config = settings.to_proto()
    assert (config.teacher.url, list(config.teacher.replica_urls)) == (
        "http://t0:8000",
        ["http://t1:8000"],
    )
    with pytest.raises(SettingsError) as refused:
        TrainSettings(teacher="smollm2-135m-instruct,http://t1:8000")
    assert refused.value.key == "teacher" and "replicas" in refused.value.message


def test_ray_nodes_reach_the_trainer_with_the_ranks_on_each(tmp_path) -> None:
    assert run_settings(tmp_path).ray_workers_per_node == 0
    spread = run_settings(tmp_path, backend="fsdp", ray_workers_per_node=2, ray_nodes=3)
    assert (spread.backend, spread.ray_workers_per_node, spread.ray_nodes) == ("fsdp", 2, 3)


def test_the_learning_rate_follows_the_model_unless_set(tmp_path) -> None:
    # A real model's folder (no weights here: counted as small) trains at 1e-5, not the rate a 7B model needs.
    assert run_settings(tmp_path).learning_rate == 1e-5
    assert run_settings(tmp_path, learning_rate=3e-6).learning_rate == 3e-6


def test_max_tokens_default_to_the_general_one_for_a_folder_and_keep_a_set_value(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    common: dict[str, Any] = {"steps": 1, "output_dir": str(tmp_path), "model": str(tmp_path)}
    assert Trainer(lambda task: 1.0, TASKS, **common).settings.max_tokens == 256
    assert Trainer(lambda task: 1.0, TASKS, max_tokens=12, **common).settings.max_tokens == 12


def test_empty_val_tasks_mean_no_validation_not_the_current_directory(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    trainer = Trainer(
        lambda task: 1.0,
        TASKS,
        val_tasks="",
        steps=1,
        output_dir=str(tmp_path),
        model=str(tmp_path),
    )
    assert trainer.settings.val_tasks == "" and not trainer.val_tasks

"""`parity train`'s settings, the trainer's run settings and the RunConfig on the wire agree, field by field."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor

from parity.api.trainer.v1 import run_pb2
from parity.core.update_settings import LORA_FIELDS, TEACHER_FIELDS, UpdateSettings, to_run_config
from parity.services.trainer.run_settings import RunSettings
from parity.training.settings import TrainSettings

# RunConfig fields that are the run's own, not settings of the update, and the messages settings travel in.
RUN_FIELDS = {"model_path", "total_steps", "checkpoint_dir", "lora", "teacher"}
PROTO_TYPES = {
    FieldDescriptor.TYPE_DOUBLE: float, FieldDescriptor.TYPE_FLOAT: float, FieldDescriptor.TYPE_INT32: int,
    FieldDescriptor.TYPE_INT64: int, FieldDescriptor.TYPE_BOOL: bool, FieldDescriptor.TYPE_STRING: str,
    FieldDescriptor.TYPE_ENUM: str,
}  # fmt: skip
CONFIG = run_pb2.RunConfig.DESCRIPTOR
LORA = run_pb2.LoraConfig.DESCRIPTOR
TEACHER = run_pb2.TeacherConfig.DESCRIPTOR


def scalar(annotation: object) -> type:
    kinds = [kind for kind in typing.get_args(annotation) if kind is not type(None)] or [annotation]
    assert len(kinds) == 1, annotation
    return typing.cast(type, kinds[0])


def update_fields() -> dict[str, dataclasses.Field[object]]:
    return {f.name: f for f in dataclasses.fields(UpdateSettings)}


def test_every_run_config_field_is_an_update_setting_of_the_same_name_and_type() -> None:
    hints = typing.get_type_hints(UpdateSettings)
    settings = update_fields()
    wire = {f.name: f for f in CONFIG.fields if f.name not in RUN_FIELDS}
    wire |= {name: LORA.fields_by_name[proto] for name, proto in LORA_FIELDS.items()}
    wire |= {name: TEACHER.fields_by_name[proto] for name, proto in TEACHER_FIELDS.items()}
    assert sorted(wire) == sorted(settings), "RunConfig and UpdateSettings name different settings"
    for name, proto in wire.items():
        kind = scalar(hints[name])
        expected = PROTO_TYPES[proto.type]
        if proto.is_repeated:
            expected = str  # lora.target_modules: the settings' comma-separated names
        assert kind is expected, (
            f"{name}: RunConfig has {expected.__name__}, the settings {kind.__name__}"
        )
        if proto.enum_type is not None:
            prefix = proto.enum_type.values_by_number[0].name.removesuffix("UNSPECIFIED")
            named = {
                v.name.removeprefix(prefix).lower().replace("_", "-")
                for v in proto.enum_type.values[1:]
            }
            choices = {choice.replace("_", "-") for choice in settings[name].metadata["choices"]}
            # Unspecified means the default; only a default may go without a value of its own.
            assert named <= choices and choices - named <= {settings[name].default}, name


def test_a_setting_whose_default_is_not_zero_has_presence_on_the_wire() -> None:
    settings = update_fields()
    for proto in CONFIG.fields:
        if proto.name in RUN_FIELDS or proto.enum_type is not None:
            continue
        default = settings[proto.name].default
        has_presence = proto.containing_oneof is not None
        # Without presence an explicit zero cannot be told from unset: zero must then be the default.
        assert has_presence or default == 0, f"{proto.name}: default {default} needs `optional`"
        assert not has_presence or default != 0 or default is None, (
            f"{proto.name}: `optional` with a zero default"
        )


@pytest.mark.parametrize("cls", [TrainSettings, RunSettings])
def test_neither_side_redefines_a_shared_setting(cls: type) -> None:
    shared = update_fields()
    base_hints = typing.get_type_hints(UpdateSettings)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, field in shared.items():
        assert name in fields, f"{cls.__name__} lacks {name}"
        assert hints[name] == base_hints[name], (
            f"{cls.__name__}.{name}: type {hints[name]} != {base_hints[name]}"
        )
        assert fields[name].default == field.default, f"{cls.__name__}.{name}: default differs"
        assert fields[name].metadata == field.metadata, (
            f"{cls.__name__}.{name}: help or choices differ"
        )


def test_every_setting_parity_train_sends_arrives_at_the_trainer_unchanged(tmp_path: Path) -> None:
    # A value for each setting that is not its default, so a setting lost on the way shows.
    changed: dict[str, Any] = {
        "groups_per_batch": 3, "learning_rate": 3e-4, "advantage_estimator": "rloo", "backend": "fsdp",
        "rollout_mode": "async", "max_policy_lag": 0, "kl_coef": 0.05, "clip_ratio": 0.3, "tis_cap": 4.0,
        "ppo_epochs": 2, "max_grad_norm": 0.5, "loss_agg_mode": "seq-mean-token-sum", "seed": 7, "dtype": "bfloat16",
        "micro_batch_tokens": 4096, "ray_workers_per_node": 2, "ray_nodes": 2, "checkpoint_interval": 0, "share_prefixes": False,
        "lora_rank": 8, "lora_alpha": 4, "lora_target_modules": "q_proj,v_proj", "lora_dropout": 0.1,
        "teacher": "http://10.0.0.5:8000,http://10.0.0.6:8000", "teacher_model": "big", "teacher_coef": 0.5, "reward_coef": 0.0,
    }  # fmt: skip
    assert sorted(changed) == sorted(update_fields()), (
        "a setting is missing from this test's values"
    )
    assert all(value != update_fields()[name].default for name, value in changed.items())
    sent = TrainSettings(**changed)
    config = to_run_config(sent, model_path=str(tmp_path), total_steps=5)
    received = RunSettings.from_proto(config)
    assert received.update_values() == sent.update_values()
    # Unset on the wire takes the one default, on both sides.
    assert RunSettings.from_proto(
        to_run_config(TrainSettings(), model_path=str(tmp_path), total_steps=1)
    ).update_values() == {
        **TrainSettings().update_values(),
        "learning_rate": 1e-5,
        "dtype": "float32",
    }

import re
from pathlib import Path

import pytest

from parity.api.trainer.v1 import run_pb2
from parity.services.runtime.errors import InvalidArgument
from parity.services.trainer.compute_defaults import resolve_dtype
from parity.services.trainer.run_settings import RunSettings


def test_proto_defaults_are_grpo_sync_auto() -> None:
    settings = RunSettings.from_proto(
        run_pb2.RunConfig(model_path="/m", total_steps=3, groups_per_batch=2), Path("/ck")
    )
    assert (settings.advantage_estimator, settings.rollout_mode, settings.backend) == (
        "grpo",
        "sync",
        "auto",
    )
    assert settings.checkpoint_dir == Path("/ck")
    assert settings.clip_ratio == 0.2 and settings.tis_cap == 2.0


def test_round_trips_through_proto_and_json() -> None:
    settings = RunSettings(Path("/m"), 5, groups_per_batch=2, advantage_estimator="rloo", rollout_mode="async", backend="cpu",
                           learning_rate=1e-3, ppo_epochs=2, max_policy_lag=3, dtype="bfloat16")  # fmt: skip
    assert RunSettings.from_proto(settings.to_proto()) == settings
    assert RunSettings.from_json(settings.to_json()) == settings


def config(**fields) -> run_pb2.RunConfig:
    return run_pb2.RunConfig(
        **{"model_path": "/m", "total_steps": 1, "groups_per_batch": 1, **fields}
    )


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (run_pb2.RunConfig(model_path="/m", total_steps=0, groups_per_batch=1), "total_steps"),
        (run_pb2.RunConfig(model_path="/m", total_steps=1, groups_per_batch=0), "groups_per_batch"),
        (run_pb2.RunConfig(total_steps=1, groups_per_batch=1), "model_path"),
        (config(clip_ratio=1.5), "clip_ratio"),
        (config(advantage_estimator=99), "advantage_estimator"),
        (config(dtype=7), "dtype"),
        # Zero is a value, not "unset": a zero that makes no sense is refused, never replaced by the default.
        (config(learning_rate=0), "learning_rate"),
        (config(clip_ratio=0), "clip_ratio"),
        (config(ppo_epochs=0), "ppo_epochs"),
        (config(max_grad_norm=0), "max_grad_norm"),
        (config(tis_cap=0), "tis_cap"),
        (config(micro_batch_tokens=0), "micro_batch_tokens"),
        (config(ray_nodes=0), "ray_nodes"),
        (config(max_policy_lag=-1), "max_policy_lag"),
        (config(learning_rate=float("nan")), "learning_rate"),
        (config(lora=run_pb2.LoraConfig(rank=0)), "lora.rank"),
        (config(lora=run_pb2.LoraConfig(rank=4, dropout=1.0)), "lora.dropout"),
        (
            config(lora=run_pb2.LoraConfig(rank=4, target_modules=["all-linear", "q_proj"])),
            "lora.target_modules",
        ),
        (config(teacher=run_pb2.TeacherConfig(model="m")), "teacher.url"),
        (config(teacher=run_pb2.TeacherConfig(url="smollm2-135m-instruct")), "teacher.url"),
        (
            config(teacher=run_pb2.TeacherConfig(url="http://t:8000", replica_urls=["t2:8000"])),
            "teacher.replica_urls",
        ),
        (config(reward_coef=0), "reward_coef"),
        (
            config(teacher_coef=-1, teacher=run_pb2.TeacherConfig(url="http://t:8000")),
            "teacher_coef",
        ),
        (
            config(
                teacher_coef=0, reward_coef=0, teacher=run_pb2.TeacherConfig(url="http://t:8000")
            ),
            "teacher_coef",
        ),
    ],
)
def test_refuses_bad_configs_naming_the_field(bad, named) -> None:
    with pytest.raises(InvalidArgument, match=rf"^{re.escape(named)}"):
        RunSettings.from_proto(bad)


def test_an_explicit_zero_is_kept_where_zero_means_something() -> None:
    settings = RunSettings.from_proto(config(max_policy_lag=0, checkpoint_interval=0, kl_coef=0.0))
    assert (settings.max_policy_lag, settings.checkpoint_interval, settings.kl_coef) == (0, 0, 0.0)
    unset = RunSettings.from_proto(config())
    assert (unset.max_policy_lag, unset.checkpoint_interval) == (1, 10)


def test_an_unset_learning_rate_follows_the_model(tmp_path) -> None:
    from parity.core.model_defaults import KNOWN_MODELS, TEST_MODEL, TEST_MODEL_MARKER

    (tmp_path / TEST_MODEL_MARKER).write_text("")
    assert (
        RunSettings.from_proto(config(model_path=str(tmp_path))).learning_rate
        == KNOWN_MODELS[TEST_MODEL].learning_rate
    )


def test_ray_workers_choose_the_engine_and_refuse_the_plain_loop(tmp_path) -> None:
    from parity.services.trainer.backends import backend_name

    assert (
        backend_name(RunSettings(tmp_path, 10, groups_per_batch=1, ray_workers_per_node=2))
        == "fsdp"
    )
    assert backend_name(RunSettings(tmp_path, 10, groups_per_batch=1, backend="fsdp")) == "fsdp"
    with pytest.raises(InvalidArgument, match="ray_workers_per_node"):
        RunSettings(tmp_path, 10, groups_per_batch=1, backend="cpu", ray_workers_per_node=2)
    with pytest.raises(InvalidArgument):
        RunSettings(tmp_path, 10, groups_per_batch=1, backend="fsdp", ray_workers_per_node=-1)
    wire = RunSettings(
        tmp_path, 10, groups_per_batch=1, ray_workers_per_node=2, micro_batch_tokens=4096
    ).to_proto()
    assert RunSettings.from_proto(wire).ray_workers_per_node == 2
    assert RunSettings.from_proto(wire).micro_batch_tokens == 4096


def test_dtype_defaults_to_auto() -> None:
    assert RunSettings.from_proto(config()).dtype == resolve_dtype("auto")
    assert RunSettings.from_proto(config(dtype=run_pb2.TRAINING_DTYPE_BFLOAT16)).dtype == "bfloat16"
    # A checkpoint written before the setting existed resumes in float32.
    saved = RunSettings(Path("/m"), 5, groups_per_batch=2).to_json()
    del saved["dtype"]
    assert RunSettings.from_json(saved).dtype == "float32"


def test_a_teacher_travels_as_its_own_message_and_reward_coef_zero_is_kept_beside_it() -> None:
    settings = RunSettings(
        Path("/m"), 2, teacher="http://10.0.0.5:8000", teacher_model="big", reward_coef=0.0
    )
    proto = settings.to_proto()
    assert (proto.teacher.url, proto.teacher.model, proto.reward_coef, proto.teacher_coef) == (
        "http://10.0.0.5:8000",
        "big",
        0.0,
        1.0,
    )
    assert RunSettings.from_proto(proto) == settings
    assert not RunSettings.from_proto(config()).teacher and not config().HasField("teacher")

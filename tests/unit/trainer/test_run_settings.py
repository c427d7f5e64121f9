from pathlib import Path

import pytest

from parity.api.trainer.v1 import run_pb2
from parity.services.runtime.errors import InvalidArgument
from parity.services.trainer.compute_defaults import resolve_dtype
from parity.services.trainer.run_settings import RunSettings


def test_proto_defaults_are_grpo_sync_auto() -> None:
    settings = RunSettings.from_proto(run_pb2.RunConfig(model_path="/m", total_steps=3, groups_per_batch=2), Path("/ck"))
    assert (settings.advantage_estimator, settings.rollout_mode, settings.backend) == ("grpo", "sync", "auto")
    assert settings.checkpoint_dir == Path("/ck")
    assert settings.clip_ratio == 0.2 and settings.tis_cap == 2.0


def test_round_trips_through_proto_and_json() -> None:
    settings = RunSettings(Path("/m"), 5, 2, advantage_estimator="rloo", rollout_mode="async", backend="cpu",
                           learning_rate=1e-3, ppo_epochs=2, max_policy_lag=3, dtype="bfloat16")  # fmt: skip
    assert RunSettings.from_proto(settings.to_proto()) == settings
    assert RunSettings.from_json(settings.to_json()) == settings


@pytest.mark.parametrize(
    "config",
    [
        run_pb2.RunConfig(model_path="/m", total_steps=0, groups_per_batch=1),
        run_pb2.RunConfig(model_path="/m", total_steps=1, groups_per_batch=0),
        run_pb2.RunConfig(total_steps=1, groups_per_batch=1),
        run_pb2.RunConfig(model_path="/m", total_steps=1, groups_per_batch=1, clip_ratio=1.5),
        run_pb2.RunConfig(model_path="/m", total_steps=1, groups_per_batch=1, overrides={"actor.lr": "1"}),
        run_pb2.RunConfig(model_path="/m", total_steps=1, groups_per_batch=1, overrides={"ppo_epochs": "two"}),
        run_pb2.RunConfig(model_path="/m", total_steps=1, groups_per_batch=1, advantage_estimator=99),
        run_pb2.RunConfig(model_path="/m", total_steps=1, groups_per_batch=1, overrides={"dtype": "float16"}),
    ],
)
def test_refuses_bad_configs(config) -> None:
    with pytest.raises(InvalidArgument):
        RunSettings.from_proto(config)


def test_ray_workers_choose_the_engine_and_refuse_the_plain_loop(tmp_path) -> None:
    from parity.services.trainer.backends import backend_name

    assert backend_name(RunSettings(tmp_path, 10, 1, ray_workers_per_node=2)) == "fsdp"
    assert backend_name(RunSettings(tmp_path, 10, 1, backend="fsdp")) == "fsdp"
    with pytest.raises(InvalidArgument, match="ray_workers_per_node"):
        RunSettings(tmp_path, 10, 1, backend="cpu", ray_workers_per_node=2)
    with pytest.raises(InvalidArgument):
        RunSettings(tmp_path, 10, 1, backend="fsdp", ray_workers_per_node=-1)
    config = RunSettings(tmp_path, 10, 1, ray_workers_per_node=2, micro_batch_tokens=4096).to_proto()
    assert RunSettings.from_proto(config).ray_workers_per_node == 2
    assert RunSettings.from_proto(config).micro_batch_tokens == 4096


def test_dtype_is_an_override_defaulting_to_auto() -> None:
    config = run_pb2.RunConfig(model_path="/m", total_steps=1, groups_per_batch=1)
    assert RunSettings.from_proto(config).dtype == resolve_dtype("auto")
    config.overrides["dtype"] = "bfloat16"
    assert RunSettings.from_proto(config).dtype == "bfloat16"
    # A checkpoint written before the setting existed resumes in float32.
    saved = RunSettings(Path("/m"), 5, 2).to_json()
    del saved["dtype"]
    assert RunSettings.from_json(saved).dtype == "float32"

"""LoRA runs: refused with the field named when the config is bad, and trained the same way by both backends,
which change the adapter alone."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from parity.api.trainer.v1 import run_pb2
from parity.services.runtime.errors import InvalidArgument
from parity.services.trainer.backends import select_backend
from parity.services.trainer.lora import check_run
from parity.services.trainer.run_settings import RunSettings
from tests.training_batch_factory import rewarded_batch
from tests.unit.trainer.backends.test_backends import BACKENDS, generated_model

PROBE = [1, 2, 3, 4, 100, 200]


@pytest.fixture(params=["untied", "tied"])
def model_dir(request) -> Path:
    return generated_model(request, request.param)


def config(**lora: Any) -> run_pb2.RunConfig:
    return run_pb2.RunConfig(
        model_path="/m", total_steps=1, groups_per_batch=1, lora=run_pb2.LoraConfig(**lora)
    )


def test_a_lora_config_defaults_to_every_linear_layer_at_twice_the_rank_and_round_trips() -> None:
    settings = RunSettings.from_proto(config(rank=8))
    assert (settings.lora_rank, settings.lora_alpha, settings.lora_target_modules) == (
        8,
        16,
        "all-linear",
    )
    custom = RunSettings(Path("/m"), 1, groups_per_batch=1, lora_rank=4, lora_alpha=4, lora_target_modules="q_proj,v_proj",
                         lora_dropout=0.1)  # fmt: skip
    assert RunSettings.from_proto(custom.to_proto()) == custom
    assert RunSettings.from_json(custom.to_json()) == custom
    # No lora: the whole model is trained.
    assert not RunSettings.from_proto(
        run_pb2.RunConfig(model_path="/m", total_steps=1, groups_per_batch=1)
    ).lora_rank


@pytest.mark.parametrize(
    ("lora", "field"),
    [
        ({"rank": 0}, "lora.rank"),
        ({"rank": -4}, "lora.rank"),
        ({"rank": 8, "alpha": -1}, "lora.alpha"),
        ({"rank": 8, "dropout": 1.0}, "lora.dropout"),
        ({"rank": 8, "target_modules": ["q_proj", ""]}, "lora.target_modules"),
        ({"rank": 8, "target_modules": ["all-linear", "q_proj"]}, "lora.target_modules"),
    ],
)
def test_a_bad_lora_config_is_refused_naming_the_field(lora, field) -> None:
    with pytest.raises(InvalidArgument, match=field):
        RunSettings.from_proto(config(**lora))


def test_target_modules_that_match_nothing_in_the_model_are_refused(tiny_model_dir) -> None:
    check_run(RunSettings(tiny_model_dir, 1, groups_per_batch=1, lora_rank=8, lora_target_modules="q_proj,model.layers.1.mlp.up_proj"),
              "cpu")  # fmt: skip
    with pytest.raises(
        InvalidArgument, match=r"lora.target_modules \['qproj'\] match no layer.*'q_proj'"
    ):
        check_run(
            RunSettings(
                tiny_model_dir,
                1,
                groups_per_batch=1,
                lora_rank=8,
                lora_target_modules="qproj,v_proj",
            ),
            "cpu",
        )


def test_fsdp_refuses_adapter_dropout_it_cannot_apply(tiny_model_dir) -> None:
    settings = RunSettings(tiny_model_dir, 1, groups_per_batch=1, lora_rank=8, lora_dropout=0.1)
    check_run(settings, "cpu")
    with pytest.raises(InvalidArgument, match="lora.dropout"):
        check_run(settings, "fsdp")


def adapter_logprobs(base: Path, adapter: Path) -> np.ndarray:
    """The probe scored by peft on the untouched base model with `adapter` on it."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter
    ).eval()
    with torch.no_grad():
        logits = model(torch.tensor([PROBE])).logits[0, :-1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(PROBE[1:])[:, None])[:, 0].numpy()


@pytest.mark.parametrize("name", BACKENDS)
def test_lora_trains_the_adapter_alone_and_resumes_exactly(name, model_dir, tmp_path) -> None:
    settings = RunSettings(
        model_dir, 10, groups_per_batch=1, backend=name, learning_rate=1e-2, lora_rank=8
    )
    backend = select_backend(settings)
    before = backend.probe_logprobs(PROBE)
    for _ in range(2):
        backend.train_step(rewarded_batch(100, 200))
    backend.save_state(tmp_path / "state")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {
        p.name for p in (tmp_path / "state").iterdir()
    }
    assert not list((tmp_path / "state").glob("model*.safetensors"))
    # The saved adapter on the original weights is the trained policy: nothing else moved.
    trained = np.array(backend.probe_logprobs(PROBE))
    assert np.abs(trained - before).max() > 0.5
    assert np.allclose(trained, adapter_logprobs(model_dir, tmp_path / "state"), atol=1e-5)
    resumed = select_backend(settings)
    resumed.load_state(tmp_path / "state")
    backend.train_step(rewarded_batch(100, 200))
    resumed.train_step(rewarded_batch(100, 200))
    assert np.allclose(backend.probe_logprobs(PROBE), resumed.probe_logprobs(PROBE), atol=1e-6)


def test_both_backends_apply_the_same_lora_update(tiny_model_dir) -> None:
    results = {}
    for name in ("cpu", "fsdp"):
        backend = select_backend(RunSettings(tiny_model_dir, 10, groups_per_batch=1, backend=name, learning_rate=1e-2, lora_rank=4,
                                             lora_target_modules="q_proj,v_proj,down_proj"))  # fmt: skip
        metrics = backend.train_step(rewarded_batch(100, 200))
        results[name] = (
            metrics["grad_norm"],
            metrics["policy_loss"],
            backend.probe_logprobs(PROBE),
        )
    (cpu_norm, cpu_loss, cpu_probe), (fsdp_norm, fsdp_loss, fsdp_probe) = (
        results["cpu"],
        results["fsdp"],
    )
    assert np.isclose(cpu_norm, fsdp_norm, rtol=1e-4) and np.isclose(
        cpu_loss, fsdp_loss, rtol=1e-4, atol=1e-6
    )
    assert np.allclose(cpu_probe, fsdp_probe, atol=1e-5)

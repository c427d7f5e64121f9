"""The fsdp backend's defaults on a CUDA machine (marker `gpu`; skipped without one).

bf16 compute over float32 weights by default, TF32 in training passes only (the weight-sync probe
stays strict float32), no gradient checkpointing where memory does not need it, and the same
update as the plain loop from the same weights.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from parity.services.trainer.backends import select_backend
from parity.services.trainer.backends.engine_logprobs import chunked_logprobs
from parity.services.trainer.backends.fsdp import FsdpBackend
from parity.services.trainer.run_settings import RunSettings
from tests.training_batch_factory import rewarded_batch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

PROBE = [1, 2, 3, 4, 100, 200, 7, 9]


def test_auto_trains_in_bfloat16_without_checkpointing_and_matches_the_plain_loop(
    tiny_model_dir,
) -> None:
    settings = RunSettings(
        tiny_model_dir, 10, groups_per_batch=1, backend="fsdp", learning_rate=1e-2
    )
    assert settings.dtype == "bfloat16"
    engine = select_backend(settings)
    assert isinstance(engine, FsdpBackend)
    assert not engine.policy.engine.module.is_gradient_checkpointing
    plain = select_backend(replace(settings, backend="cpu"))
    assert np.allclose(engine.probe_logprobs(PROBE), plain.probe_logprobs(PROBE), atol=0.1)
    for _ in range(2):
        engine_metrics, plain_metrics = (
            engine.train_step(rewarded_batch(100, 200)),
            plain.train_step(rewarded_batch(100, 200)),
        )
        assert engine_metrics["grad_norm"] == pytest.approx(plain_metrics["grad_norm"], rel=0.05)
    assert np.allclose(engine.probe_logprobs(PROBE), plain.probe_logprobs(PROBE), atol=0.15)


def test_tf32_in_training_passes_and_a_strict_float32_probe(tiny_model_dir, tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    backend = select_backend(
        RunSettings(
            tiny_model_dir,
            10,
            groups_per_batch=1,
            backend="fsdp",
            dtype="float32",
            learning_rate=1e-2,
        )
    )
    assert isinstance(backend, FsdpBackend)
    seen: list[tuple[bool, bool]] = []
    backend.policy.engine.module.register_forward_pre_hook(
        lambda *_: seen.append((torch.is_grad_enabled(), torch.backends.cuda.matmul.allow_tf32))
    )
    backend.train_step(rewarded_batch(100, 200))
    probe = backend.probe_logprobs(PROBE)
    assert (True, True) in seen and (False, False) in seen and (False, True) not in seen
    backend.save_weights(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([PROBE])).logits[0, :-1]
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(PROBE[1:])[:, None])[:, 0]
    # Within the float32 / float32 probe tolerance's allowance for one side (probe_tolerance.py).
    assert np.abs(np.array(probe) - expected.double().numpy()).max() < 5e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_logprobs_on_the_gpu_equal_a_whole_log_softmax(dtype) -> None:
    generator = torch.Generator(device="cuda").manual_seed(0)
    logits = (torch.randn(4096, 32000, device="cuda", generator=generator) * 4).to(dtype)
    labels = torch.randint(0, 32000, (4096,), device="cuda", generator=generator)
    expected = torch.log_softmax(logits.float(), -1).gather(-1, labels[:, None]).squeeze(-1)
    torch.testing.assert_close(chunked_logprobs(logits, labels), expected, atol=1e-4, rtol=0)

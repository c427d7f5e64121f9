"""The defaults a run computes with on CUDA and on CPU, decided without a GPU."""

from __future__ import annotations

import pytest
import torch

from parity.services.trainer import compute_defaults
from parity.services.trainer.backends.engine_logprobs import chunked_logprobs
from parity.services.trainer.compute_defaults import (
    CPU_BF16_ENV,
    attention_layout,
    cpu_bf16_units,
    dtype_reason,
    estimated_parameter_count,
    needs_gradient_checkpointing,
    resolve_dtype,
)
from parity.services.trainer.probe_tolerance import probe_tolerance
from parity.services.trainer.run_settings import RunSettings

# Qwen2.5-0.5B's config.json sizes, and the 0.9B shape bench/trainer.py runs on a GPU.
QWEN_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
            "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}  # fmt: skip
BENCH_09B = {"hidden_size": 2048, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
             "num_key_value_heads": 8, "vocab_size": 1024}  # fmt: skip
H100 = 80 * 2**30


@pytest.mark.parametrize(("cuda", "units", "expected"), [
    (True, (), "bfloat16"), (False, ("amx_bf16",), "bfloat16"), (False, ("avx512_bf16",), "bfloat16"),
    (False, (), "float32"),
])  # fmt: skip
def test_auto_dtype_is_bfloat16_on_cuda_and_on_cpus_with_bfloat16_units(
    cuda, units, expected
) -> None:
    assert resolve_dtype("auto", cuda=cuda, cpu_bf16=units) == expected
    assert dtype_reason("auto", cuda=cuda, cpu_bf16=units).startswith(f"dtype auto: {expected} (")
    # A dtype that is named is kept on either.
    assert resolve_dtype("float32", cuda=cuda, cpu_bf16=units) == "float32"
    assert resolve_dtype("bfloat16", cuda=cuda, cpu_bf16=units) == "bfloat16"


def test_a_cpu_without_bfloat16_units_says_why_it_stays_in_float32() -> None:
    assert dtype_reason("auto", cuda=False, cpu_bf16=()) == (
        "dtype auto: float32 (this CPU reports none of amx_bf16, avx512_bf16, so bfloat16 would run slower than "
        "float32 here; set dtype bfloat16 to use it anyway)"
    )


def test_the_units_are_read_from_the_cpus_flags_and_the_environment_may_say_otherwise(
    monkeypatch,
) -> None:
    sapphire_rapids = (
        "processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
    )
    skylake = "processor\t: 0\nflags\t\t: fpu avx512f avx512_vnni\n"
    monkeypatch.delenv(CPU_BF16_ENV, raising=False)
    assert cpu_bf16_units(sapphire_rapids) == ("amx_bf16", "avx512_bf16")
    assert cpu_bf16_units(skylake) == ()
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    assert cpu_bf16_units(sapphire_rapids) == ()
    monkeypatch.setenv(CPU_BF16_ENV, "1")
    assert cpu_bf16_units(skylake) and resolve_dtype("auto", cuda=False) == "bfloat16"
    monkeypatch.setenv(CPU_BF16_ENV, "yes")
    with pytest.raises(ValueError, match="PARITY_CPU_BF16 must be 0 or 1, got 'yes'"):
        cpu_bf16_units(skylake)


def test_a_run_resolves_auto_where_it_trains_and_the_probe_tolerance_follows(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(compute_defaults, "cuda_available", lambda: True)
    on_gpu = RunSettings(tmp_path, 10, groups_per_batch=1)
    assert on_gpu.dtype == "bfloat16"
    assert probe_tolerance(on_gpu.dtype, "bfloat16") == probe_tolerance("bfloat16", "bfloat16")
    monkeypatch.setattr(compute_defaults, "cuda_available", lambda: False)
    assert RunSettings(tmp_path, 10, groups_per_batch=1).dtype == "float32"
    # A run's saved settings hold the resolved dtype, so a resumed run keeps it on any machine.
    assert RunSettings.from_json(on_gpu.to_json()).dtype == "bfloat16"
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("float16")


def test_padding_free_flash_attention_only_where_flash_attn_is_installed_on_a_gpu() -> None:
    assert attention_layout(on_gpu=True, flash_attn=True) == compute_defaults.AttentionLayout(
        "flash_attention_2", True
    )
    assert attention_layout(on_gpu=True, flash_attn=False).implementation == "sdpa"
    assert not attention_layout(on_gpu=False, flash_attn=True).padding_free


def test_parameter_count_from_config_matches_the_model() -> None:
    # Qwen2.5-0.5B has 494M parameters (biases and norms are the rest).
    assert abs(estimated_parameter_count(QWEN_05B) - 494e6) / 494e6 < 0.01


def test_gradient_checkpointing_only_when_a_micro_batch_would_not_fit() -> None:
    # The bench's 0.9B shape: 16,384-token micro-batches fit an H100 in bf16 without recomputing.
    assert not needs_gradient_checkpointing(BENCH_09B, 16384, "bfloat16", H100, padding_free=False)
    # Four times the tokens, or a 24 GB card, do not.
    assert needs_gradient_checkpointing(BENCH_09B, 4 * 16384, "bfloat16", H100, padding_free=False)
    assert needs_gradient_checkpointing(
        BENCH_09B, 16384, "bfloat16", 24 * 2**30, padding_free=False
    )
    # float32 activations take twice the room; padding-free micro-batches carry no padding.
    assert needs_gradient_checkpointing(BENCH_09B, 16384, "float32", H100, padding_free=False)
    assert needs_gradient_checkpointing(BENCH_09B, 20000, "bfloat16", H100, padding_free=False)
    assert not needs_gradient_checkpointing(BENCH_09B, 20000, "bfloat16", H100, padding_free=True)
    # A config the estimate cannot read keeps checkpointing on.
    assert needs_gradient_checkpointing(
        {"text_config": QWEN_05B}, 1, "bfloat16", H100, padding_free=True
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_logprobs_equal_a_whole_log_softmax_with_the_same_gradient(
    dtype, monkeypatch
) -> None:
    monkeypatch.setattr(
        "parity.services.trainer.backends.engine_logprobs.CHUNK_ELEMENTS", 3 * 50
    )  # 3 rows a chunk
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 7, 50, generator=generator) * 4).to(dtype).requires_grad_()
    labels = torch.randint(0, 50, (2, 7), generator=generator)
    expected_logits = logits.detach().clone().requires_grad_()
    expected = (
        torch.log_softmax(expected_logits.float(), -1).gather(-1, labels[..., None]).squeeze(-1)
    )
    got = chunked_logprobs(logits, labels)
    assert got.dtype == torch.float32 and got.shape == labels.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    weights = torch.rand(2, 7, generator=generator)
    (got * weights).sum().backward()
    (expected * weights).sum().backward()
    torch.testing.assert_close(
        logits.grad, expected_logits.grad, atol=1e-2 if dtype == torch.bfloat16 else 1e-6, rtol=0
    )

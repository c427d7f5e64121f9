"""What a run computes with when it does not say: dtype, TF32, attention kernel, gradient checkpointing.

On CUDA a run trains as verl's own trainer does on a GPU: bf16 forward and backward over
float32 master weights and AdamW state (`dtype` auto), TF32 for the matmuls that stay
float32, flash-attn's padding-free (varlen) micro-batches where flash-attn is installed
(else SDPA on padded micro-batches), and gradient checkpointing only when the estimate
below says activations would not fit. On CPU: bfloat16 over float32 master weights where the
CPU has bfloat16 matrix units (AMX, AVX-512-BF16), else float32; SDPA; no checkpointing.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# `dtype` values a run may name; "auto" is resolved where the run computes.
DTYPE_CHOICES = ("auto", "float32", "bfloat16")
# /proc/cpuinfo flags of CPU bfloat16 matrix units: Intel's AMX tiles (Sapphire Rapids on) and
# AVX-512-BF16 (Intel since Cooper Lake, AMD since Zen 4). With them a bfloat16 matmul runs several
# times a float32 one (2048x2048 on 2 cores with AMX: about 740 against 90 GFLOP/s); without them
# oneDNN emulates bfloat16 and it runs slower than float32.
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
CPU_BF16_ENV = "PARITY_CPU_BF16"
COMPUTE_BYTES = {"float32": 4, "bfloat16": 2}
# Share of the card a run may plan to fill; the rest is the CUDA context, the allocator's slack and
# transient buffers (an all-gathered layer, a logits chunk).
USABLE_SHARE = 0.85
# Padded micro-batches carry padding beside their tokens; the engine balances micro-batches by
# tokens, not by length, so the padded size runs up to about this much over the tokens.
PADDING_FACTOR = 1.5
# config.json keys the memory estimate reads.
DECODER_SIZES = {
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
}


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@functools.cache
def _proc_cpuinfo() -> str:
    """Linux's CPU description (empty where there is none); it does not change while a process runs."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_bf16_units(cpuinfo: str | None = None) -> tuple[str, ...]:
    """The bfloat16 matrix units this CPU reports (Linux's /proc/cpuinfo flags); none where it cannot tell.

    `PARITY_CPU_BF16=0` says there are none, `=1` that there are (a VM that hides the flags of units
    it has), whatever the flags say."""
    override = os.environ.get(CPU_BF16_ENV, "")
    if override in ("0", "1"):
        return ("set by " + CPU_BF16_ENV,) if override == "1" else ()
    if override:
        raise ValueError(f"{CPU_BF16_ENV} must be 0 or 1, got {override!r}")
    cpuinfo = _proc_cpuinfo() if cpuinfo is None else cpuinfo
    flags = next(
        (
            line.split(":", 1)[1].split()
            for line in cpuinfo.splitlines()
            if line.startswith("flags")
        ),
        [],
    )
    return tuple(flag for flag in BF16_CPU_FLAGS if flag in flags)


def _resolved(dtype: str, cuda: bool | None, cpu_bf16: tuple[str, ...] | None) -> tuple[str, str]:
    """The dtype `dtype` resolves to here, and the one line that says why."""
    if dtype not in DTYPE_CHOICES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {list(DTYPE_CHOICES)}")
    if dtype != "auto":
        return dtype, f"dtype {dtype}: as set"
    if cuda_available() if cuda is None else cuda:
        return "bfloat16", "dtype auto: bfloat16 (CUDA)"
    units = cpu_bf16_units() if cpu_bf16 is None else cpu_bf16
    if units:
        return "bfloat16", f"dtype auto: bfloat16 (this CPU has {', '.join(units)})"
    return "float32", (f"dtype auto: float32 (this CPU reports none of {', '.join(BF16_CPU_FLAGS)}, "
                       "so bfloat16 would run slower than float32 here; set dtype bfloat16 to use it anyway)")  # fmt: skip


def resolve_dtype(
    dtype: str, cuda: bool | None = None, cpu_bf16: tuple[str, ...] | None = None
) -> str:
    """The dtype a run computes in: `auto` is bfloat16 on CUDA and on a CPU with bfloat16 matrix units,
    float32 on any other CPU; the others stay."""
    return _resolved(dtype, cuda, cpu_bf16)[0]


def dtype_reason(
    dtype: str, cuda: bool | None = None, cpu_bf16: tuple[str, ...] | None = None
) -> str:
    """One line on what `dtype` resolves to here, and why."""
    return _resolved(dtype, cuda, cpu_bf16)[1]


@dataclass(frozen=True)
class AttentionLayout:
    implementation: str
    """transformers' attn_implementation."""
    padding_free: bool
    """verl's use_remove_padding: micro-batches as one packed row with per-sequence positions."""


def attention_layout(on_gpu: bool, flash_attn: bool | None = None) -> AttentionLayout:
    """flash-attn's varlen kernel on packed rows when it is installed on a GPU, else SDPA on padded rows.

    Without flash-attn a packed row would reach SDPA with a dense block-diagonal mask over the
    whole micro-batch (quadratic in its tokens), so padded rows, whose masks SDPA's
    memory-efficient kernel handles, are faster.
    """
    if flash_attn is None:
        flash_attn = importlib.util.find_spec("flash_attn") is not None
    if on_gpu and flash_attn:
        return AttentionLayout("flash_attention_2", padding_free=True)
    return AttentionLayout("sdpa", padding_free=False)


def estimated_parameter_count(config: dict) -> int:
    """Parameters of a Llama/Qwen2-shaped decoder from its config.json (biases and norms aside)."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    kv = hidden * config.get("num_key_value_heads", heads) // heads
    per_layer = (
        hidden * (hidden + 2 * kv) + hidden * hidden + 3 * hidden * config["intermediate_size"]
    )
    embeddings = config["vocab_size"] * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return layers * per_layer + embeddings


def activation_bytes_per_token(config: dict, dtype: str) -> int:
    """Bytes one token's activations hold from forward to backward without checkpointing (an estimate).

    Per decoder layer, in the compute dtype: the projections' input, attention's q, k, v and
    output, o_proj's input, the MLP's input, gate, activation, up and product; and each of the
    two RMSNorms' float32 input and bf16 output. Then the logits (the engine keeps two copies)
    and their float32 share.
    """
    size = COMPUTE_BYTES[dtype]
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    kv = hidden * config.get("num_key_value_heads", heads) // heads
    per_layer = size * (5 * hidden + 2 * kv + 4 * inter) + 2 * (4 + size) * hidden
    return config["num_hidden_layers"] * per_layer + config["vocab_size"] * (2 * size + 4)


def needs_gradient_checkpointing(
    config: dict,
    micro_batch_tokens: int,
    dtype: str,
    device_bytes: int,
    padding_free: bool,
    lora: bool = False,
) -> bool:
    """Whether one micro-batch's activations would overflow the card beside the model's training state.

    The state is float32 weights, gradients and AdamW's two moments (16 bytes a parameter;
    a LoRA run's frozen base only its 4), plus a compute-dtype copy of the weights.
    Checkpointing recomputes each layer's forward during backward (a third more arithmetic),
    so it is on only when this says it must be; lower `micro_batch_tokens` to fit without it.
    A config without a decoder's usual sizes (a multimodal model's nested config) keeps it on.
    """
    if not config.keys() >= DECODER_SIZES:
        return True
    parameters = estimated_parameter_count(config)
    state = parameters * ((4 if lora else 16) + COMPUTE_BYTES[dtype])
    tokens = micro_batch_tokens * (1.0 if padding_free else PADDING_FACTOR)
    activations = tokens * activation_bytes_per_token(config, dtype)
    return state + activations > USABLE_SHARE * device_bytes


@contextmanager
def tf32_matmuls() -> Iterator[None]:
    """float32 matmuls and convolutions on TF32 tensor cores for the duration (training passes only:
    the weight-sync probe stays strict float32, so its tolerance still follows from the dtypes)."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved

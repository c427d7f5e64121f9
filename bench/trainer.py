"""Training backends side by side: verl's FSDP engine against a plain PyTorch loop, on the same batch.

Generates a Qwen2-shaped model of the requested size, then for each backend runs
warm-up and timed update steps on the same ragged, multi-turn-masked batch and prints
step time, tokens/s, the step's ratio to the plain loop's, peak GPU memory and, on CUDA,
MFU. `plain` is the reference: a plain PyTorch loop on the same device, model, batch,
loss (`policy_loss`) and dtype (bf16 autocast over float32 weights on CUDA by default, TF32
for float32 matmuls there), no engine. `cpu` is Parity's plain-loop backend, which runs on CPU only. It also checks
what weight sync relies on: the engine's probe logprobs against a plain Hugging Face
forward pass of its saved weights.

    .venv/bin/python bench/trainer.py                       # tiny model, CPU, ~1 minute
    .venv/bin/python bench/trainer.py --profile             # also where a step's time goes
    .venv/bin/python bench/trainer.py --prefix-rows         # the cpu loop with and without shared prefixes
    .venv/bin/python bench/trainer.py --prefix-rows --backends cpu,fsdp   # both backends' shared prefixes
    python bench/trainer.py --hidden 1024 --layers 16 --heads 16 --rows 32 --length 2048   # on a GPU

The last line printed is one JSON object with every row.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from plain_loop import PlainLoop
from prefix_rows import prefix_rows, print_prefix_rows
from step_timing import PROFILE_KEYS, policy_module, profile_step, timed_steps

from parity.services.inference.tiny_model import TinyModelSpec, generate_tiny_model
from parity.services.trainer.backends import select_backend
from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.compute_defaults import resolve_dtype
from parity.services.trainer.run_settings import RunSettings

# Dense bf16 peak of one card, FLOP/s, by a word of its name; MFU is 6 · parameters · tokens/s over it.
PEAK_BF16_FLOPS = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
    "A10": 125e12,
}


def ragged_batch(rows: int, length: int, vocab: int, seed: int = 0) -> TrainingBatch:
    """Rows of 50–100% of `length` tokens; the policy sampled the second half of each, in two turns."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.zeros(rows, length, dtype=torch.long)
    attention = torch.zeros_like(ids)
    mask = torch.zeros(rows, length - 1)
    rewards = torch.zeros(rows, length - 1)
    returns = (torch.arange(rows) % 2).double().numpy()
    for row in range(rows):
        n = int(length * (0.5 + 0.5 * torch.rand(1, generator=generator)))
        ids[row, :n] = torch.randint(5, vocab - 1, (n,), generator=generator)
        attention[row, :n] = 1
        half, three_quarters = n // 2, (3 * n) // 4
        mask[row, half - 1 : three_quarters - 1] = 1
        mask[row, three_quarters + 2 : n - 1] = 1
        rewards[row, n - 2] = float(returns[row])
    return TrainingBatch(
        input_ids=ids, attention_mask=attention, response_mask=mask,
        rollout_logprobs=-torch.rand(rows, length - 1, generator=generator) * mask, token_rewards=rewards,
        group_index=np.array([str(row // 8) for row in range(rows)], dtype=object), rewards=returns,
        policy_versions=np.zeros(rows, dtype=np.int64),
    )  # fmt: skip


def probe_gap(backend, directory: Path, probe: list[int]) -> tuple[float, float]:
    """Largest |backend - transformers| logprob on the probe, from the weights the backend saves for vLLM,
    and the seconds the save took (the trainer's half of a weight push: gather the weights, write safetensors)."""
    from transformers import AutoModelForCausalLM

    started = time.perf_counter()
    backend.save_weights(directory)
    save_seconds = time.perf_counter() - started
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).to(device)  # type: ignore[arg-type]
    ids = torch.tensor([probe], device=device)
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float()
    expected = (
        torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0].double().cpu().numpy()
    )
    del model
    return float(np.abs(np.array(backend.probe_logprobs(probe)) - expected).max()), save_seconds


def peak_flops() -> float | None:
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((flops for word, flops in PEAK_BF16_FLOPS.items() if word in name), None)


def run(
    name: str, dtype: str, model: Path, batch: TrainingBatch, args: argparse.Namespace, work: Path
) -> dict[str, object]:
    settings = RunSettings(
        model, 10, groups_per_batch=1, backend="cpu" if name == "plain" else name, learning_rate=1e-5,
        micro_batch_tokens=args.micro_batch_tokens, dtype=dtype,
    )  # fmt: skip
    on_gpu = torch.cuda.is_available() and name != "cpu"
    backend = (
        PlainLoop(settings, torch.device("cuda" if on_gpu else "cpu"))
        if name == "plain"
        else select_backend(settings)
    )
    parameters = sum(p.numel() for p in policy_module(backend).parameters())
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    seconds, cpu_seconds, metrics = timed_steps(backend, batch, args)
    step = statistics.median(seconds)
    peak = peak_flops() if on_gpu else None
    row: dict[str, object] = {
        "backend": name,
        "parameters": parameters,
        "device": "cuda" if on_gpu else "cpu",
        "dtype": settings.dtype,
        "step_ms": round(step * 1000, 1),
        # This process's CPU time a step: on a shared CPU machine it moves far less with the load than wall time.
        "cpu_ms": round(statistics.median(cpu_seconds) * 1000, 1),
        "tokens_per_s": round(batch.token_count / step),
        "mfu": round(6 * parameters * batch.token_count / step / peak, 4) if peak else None,
        "peak_gpu_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2)
        if torch.cuda.is_available()
        else 0.0,
        "grad_norm": round(metrics["grad_norm"], 5),
    }
    if args.profile:
        row |= profile_step(backend, batch)
    probe = batch.input_ids[0, : int(batch.attention_mask[0].sum())].tolist()[:256]
    row["probe_max_diff"], row["save_weights_s"] = probe_gap(
        backend, work / f"{name}-{settings.dtype}", probe
    )
    backend.close()
    del backend
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return row


def with_ratios(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each row's step time over the plain loop's on the same device and dtype (None without one)."""
    plain = {(row["device"], row["dtype"]): row for row in rows if row["backend"] == "plain"}
    for row in rows:
        baseline = plain.get((row["device"], row["dtype"]))
        row["vs_plain"] = (
            round(number(row, "step_ms") / number(baseline, "step_ms"), 2) if baseline else None
        )
        row["cpu_vs_plain"] = (
            round(number(row, "cpu_ms") / number(baseline, "cpu_ms"), 2) if baseline else None
        )
    return rows


def number(row: dict[str, object], key: str) -> float:
    """One of a row's measurements (run() rounds each to a float or an int)."""
    value = row[key]
    assert isinstance(value, int | float), (key, value)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        type=Path,
        help="a model folder to train (the default model's, say) instead of a generated one",
    )
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument(
        "--heads", type=int, default=2, help="attention heads; head_dim is hidden / heads"
    )
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--micro-batch-tokens", type=int, default=16384)
    parser.add_argument(
        "--dtype",
        default="auto",
        help="comma-separated of float32, bfloat16, auto (bfloat16 on CUDA or a CPU with bfloat16 units, else float32)",
    )
    parser.add_argument(
        "--backends",
        default=None,
        help="comma-separated of plain, cpu, fsdp (default plain,fsdp on CUDA, else all three)",
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="torch CPU threads (default: torch's own)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also split one step: forward, backward, optimizer, other",
    )
    parser.add_argument(
        "--prefix-rows", action="store_true",
        help="instead: each backend (default cpu, fsdp on CUDA) with and without shared prefixes, group sizes 8 and 16, prompt:reply 1:1, 10:1, 50:1",
    )  # fmt: skip
    parser.add_argument(
        "--prefix-groups", type=int, default=1, help="with --prefix-rows: groups a batch holds"
    )
    parser.add_argument(
        "--reply", type=int, default=64, help="with --prefix-rows: tokens of each row's own reply"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    names = args.backends or ("plain,fsdp" if torch.cuda.is_available() else "plain,cpu,fsdp")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        spec = TinyModelSpec(
            hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
            num_key_value_heads=max(1, args.heads // 2), intermediate_size=args.hidden * 2,
        )  # fmt: skip
        model = args.model or generate_tiny_model(work / "model", spec)
        config = json.loads((model / "config.json").read_text())
        vocab = config["vocab_size"]
        if args.prefix_rows:
            backends = (args.backends or ("fsdp" if torch.cuda.is_available() else "cpu")).split(
                ","
            )
            dtypes = [resolve_dtype(dtype) for dtype in args.dtype.split(",")]
            shared = [
                row
                for dtype in dtypes
                for name in backends
                for row in prefix_rows(model, vocab, name, dtype, args)
            ]
            print(f"model: {model.name}, hidden {config['hidden_size']}, {config['num_hidden_layers']} layers; "
                  f"{args.prefix_groups} groups a batch, replies of {args.reply} tokens")  # fmt: skip
            print_prefix_rows(shared)
            print(json.dumps({"prefix_rows": shared}))
            return
        batch = ragged_batch(args.rows, args.length, vocab)
        runs = [
            (name, resolve_dtype(dtype))
            for dtype in args.dtype.split(",")
            for name in names.split(",")
        ]
        rows = with_ratios([run(name, dtype, model, batch, args, work) for name, dtype in runs])
    card = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(
        f"model: {model.name}, hidden {config['hidden_size']}, {config['num_hidden_layers']} layers, {number(rows[0], 'parameters') / 1e6:.0f}M parameters; "
        f"batch {args.rows} rows, {batch.token_count} tokens; {card}"
    )
    print(
        f"{'backend':<8} {'device':<6} {'dtype':<9} {'step ms':>9} {'vs plain':>9} {'CPU ms':>9} {'vs plain':>9} "
        f"{'tokens/s':>10} {'MFU':>7} "
        f"{'peak GPU GB':>12} {'probe diff':>11} {'save s':>7}"
    )
    for row in rows:
        mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else "-"
        ratio = f"{row['vs_plain']:.2f}x" if row["vs_plain"] is not None else "-"
        cpu_ratio = f"{row['cpu_vs_plain']:.2f}x" if row["cpu_vs_plain"] is not None else "-"
        print(
            f"{row['backend']:<8} {row['device']:<6} {row['dtype']:<9} {row['step_ms']:>9} {ratio:>9} "
            f"{row['cpu_ms']:>9} {cpu_ratio:>9} "
            f"{row['tokens_per_s']:>10} {mfu:>7} {row['peak_gpu_gb']:>12} {row['probe_max_diff']:>11.2e} "
            f"{row['save_weights_s']:>7.2f}"
        )
    if args.profile:
        print(f"\n{'backend':<8} {'dtype':<9} " + " ".join(f"{key:>13}" for key in PROFILE_KEYS))
        for row in rows:
            print(
                f"{row['backend']:<8} {row['dtype']:<9} "
                + " ".join(f"{row[key]:>13}" for key in PROFILE_KEYS)
            )
    print(
        json.dumps(
            {
                "tokens": batch.token_count,
                "card": card,
                "parameters": rows[0]["parameters"],
                "rows": rows,
            }
        )
    )


if __name__ == "__main__":
    main()

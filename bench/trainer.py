"""Training backends side by side: the plain loop and verl's FSDP engine, on the same batches.

Generates a Qwen2-shaped model of the requested size, then for each backend runs
warm-up and timed update steps on the same ragged, multi-turn-masked batch and prints
step time, tokens/s and peak GPU memory. It also checks what weight sync relies on: the
engine's probe logprobs against a plain Hugging Face forward pass of its saved weights.

    .venv/bin/python bench/trainer.py                       # tiny model, CPU, ~1 minute
    python bench/trainer.py --hidden 1024 --layers 16 --rows 64 --length 1024   # on a GPU

The last line printed is one JSON object with every row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from parity.services.inference.tiny_model import TinyModelSpec, generate_tiny_model
from parity.services.trainer.backends import select_backend
from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.run_settings import RunSettings


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


def probe_gap(backend, directory: Path, probe: list[int]) -> float:
    """Largest |engine - transformers| logprob on the probe, from the weights the backend saves for vLLM."""
    from transformers import AutoModelForCausalLM

    backend.save_weights(directory)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).to(device)
    ids = torch.tensor([probe], device=device)
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float()
    expected = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0].double().cpu().numpy()
    return float(np.abs(np.array(backend.probe_logprobs(probe)) - expected).max())


def run(name: str, model: Path, batch: TrainingBatch, args: argparse.Namespace, work: Path) -> dict[str, object]:
    settings = RunSettings(model, 10, 1, backend=name, learning_rate=1e-5, micro_batch_tokens=args.micro_batch_tokens)
    backend = select_backend(settings)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    for _ in range(args.warmup):
        backend.train_step(batch)
    seconds = []
    for _ in range(args.steps):
        started = time.perf_counter()
        metrics = backend.train_step(batch)
        seconds.append(time.perf_counter() - started)
    step = statistics.median(seconds)
    probe = batch.input_ids[0, : int(batch.attention_mask[0].sum())].tolist()[:256]
    return {
        "backend": name,
        "device": "cuda" if name == "fsdp" and torch.cuda.is_available() else "cpu",
        "step_ms": round(step * 1000, 1),
        "tokens_per_s": round(batch.token_count / step),
        "peak_gpu_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else 0.0,
        "grad_norm": round(metrics["grad_norm"], 5),
        "probe_max_diff": probe_gap(backend, work / name, probe),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2, help="attention heads; head_dim is hidden / heads")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--micro-batch-tokens", type=int, default=16384)
    parser.add_argument("--backends", default="cpu,fsdp")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        spec = TinyModelSpec(
            hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
            num_key_value_heads=max(1, args.heads // 2), intermediate_size=args.hidden * 2,
        )  # fmt: skip
        model = generate_tiny_model(work / "model", spec)
        batch = ragged_batch(args.rows, args.length, spec.vocab_size)
        rows = [run(name, model, batch, args, work) for name in args.backends.split(",")]
    print(f"model: hidden {args.hidden}, {args.layers} layers; batch {args.rows} rows, {batch.token_count} tokens")
    header = f"{'backend':<8} {'device':<6} {'step ms':>9} {'tokens/s':>10} {'peak GPU GB':>12} {'probe diff':>11}"
    print(header)
    for row in rows:
        print(
            f"{row['backend']:<8} {row['device']:<6} {row['step_ms']:>9} {row['tokens_per_s']:>10} "
            f"{row['peak_gpu_gb']:>12} {row['probe_max_diff']:>11.2e}"
        )
    print(json.dumps({"tokens": batch.token_count, "rows": rows}))


if __name__ == "__main__":
    main()

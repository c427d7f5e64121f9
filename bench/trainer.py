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
import contextlib
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from parity.services.inference.tiny_model import TinyModelSpec, generate_tiny_model
from parity.services.trainer.backends import select_backend
from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.compute_defaults import resolve_dtype, tf32_matmuls
from parity.services.trainer.policy_loss import (
    LossSettings,
    compute_advantages,
    policy_loss,
    token_logprobs,
)
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
# The step profile's figures (milliseconds, and aten ops dispatched).
PROFILE_KEYS = ("forward_ms", "backward_ms", "optimizer_ms", "other_ms", "aten_ops")


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


class PlainLoop:
    """The baseline: one Hugging Face model on the device, AdamW, and `policy_loss`; nothing else.

    Float32 weights and optimizer state; forward and backward under autocast in the run's
    dtype (as FSDP's mixed precision computes); rows sorted by length into micro-batches of
    at most `micro_batch_tokens` padded positions; the old log-probs are the first pass's own
    (one PPO epoch), as the `cpu` backend takes them.
    """

    name = "plain"

    def __init__(self, settings: RunSettings, device: torch.device) -> None:
        from transformers import AutoModelForCausalLM

        torch.manual_seed(settings.seed)
        self.settings, self.device = settings, device
        self.dtype = getattr(torch, resolve_dtype(settings.dtype))
        # transformers types PreTrainedModel.to as a wrapper of nn.Module.to whose first argument is the model.
        self.model = AutoModelForCausalLM.from_pretrained(
            settings.model_path, dtype=torch.float32, attn_implementation="sdpa"
        ).to(device)  # type: ignore[arg-type]
        fused: dict[str, Any] = {"fused": True} if device.type == "cuda" else {}
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=settings.lr, weight_decay=0.0, **fused
        )
        self.loss_settings = LossSettings(
            settings.clip_ratio, settings.tis_cap, 0.0, settings.loss_agg_mode
        )

    def micro_batches(self, batch: TrainingBatch) -> list[torch.Tensor]:
        lengths = batch.attention_mask.sum(dim=1)
        groups: list[list[int]] = []
        for row in torch.argsort(lengths, descending=True).tolist():
            if (
                groups
                and int(lengths[groups[-1][0]]) * (len(groups[-1]) + 1)
                <= self.settings.micro_batch_tokens
            ):
                groups[-1].append(row)
            else:
                groups.append([row])
        return [torch.tensor(group) for group in groups]

    def train_step(self, batch: TrainingBatch) -> dict[str, float]:
        # float32 matmuls on TF32 tensor cores on CUDA, as the engine's training passes run them.
        with tf32_matmuls() if self.device.type == "cuda" else contextlib.nullcontext():
            return self._train_step(batch)

    def _train_step(self, batch: TrainingBatch) -> dict[str, float]:
        self.model.train()
        advantages = compute_advantages(batch, self.settings.advantage_estimator)
        whole: dict[str, float] = {
            "dp_size": 1,
            "batch_num_tokens": int(batch.response_mask.sum()),
            "global_batch_size": batch.size,
        }
        for rows in self.micro_batches(batch):
            length = int(batch.attention_mask[rows].sum(dim=1).max())
            ids, attention = (
                t[rows, :length].to(self.device) for t in (batch.input_ids, batch.attention_mask)
            )
            mask, rollout, adv = (
                t[rows, : length - 1].to(self.device)
                for t in (batch.response_mask, batch.rollout_logprobs, advantages)
            )
            with torch.autocast(
                self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32
            ):
                logits = self.model(input_ids=ids, attention_mask=attention).logits
            logprobs, _entropy = token_logprobs(logits, ids)
            loss, _ = policy_loss(
                logprobs, logprobs.detach(), adv, mask, rollout, self.loss_settings, None, whole
            )
            loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), self.settings.max_grad_norm
        )
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": float(grad_norm)}

    def probe_logprobs(self, token_ids: list[int]) -> list[float]:
        ids = torch.tensor([token_ids], device=self.device)
        with (
            torch.no_grad(),
            torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32),
        ):
            logprobs, _ = token_logprobs(self.model(ids).logits, ids)
        return logprobs[0].double().tolist()

    def save_weights(self, directory: Path) -> None:
        self.model.save_pretrained(directory)

    def close(self) -> None:
        """Nothing outlives the loop."""


def prefix_batch(
    groups: int,
    group_size: int,
    prompt: int,
    reply: int,
    vocab: int,
    seed: int = 0,
    shared: bool = True,
) -> TrainingBatch:
    """GRPO groups: `group_size` rows per group share a prompt of `prompt` tokens (each its own unless
    `shared`), each with a reply of its own."""
    generator = torch.Generator().manual_seed(seed)
    rows, length = groups * group_size, prompt + reply
    ids = torch.randint(5, vocab - 1, (rows, length), generator=generator)
    for group in range(groups if shared else 0):
        ids[group * group_size : (group + 1) * group_size, :prompt] = ids[
            group * group_size, :prompt
        ]
    mask, rewards = torch.zeros(rows, length - 1), torch.zeros(rows, length - 1)
    mask[:, prompt - 1 :] = 1
    returns = (torch.arange(rows) % 2).double().numpy()
    rewards[:, -1] = torch.from_numpy(returns).float()
    return TrainingBatch(
        input_ids=ids, attention_mask=torch.ones_like(ids), response_mask=mask,
        rollout_logprobs=-torch.rand(rows, length - 1, generator=generator) * mask, token_rewards=rewards,
        group_index=np.array([str(row // group_size) for row in range(rows)], dtype=object), rewards=returns,
        policy_versions=np.zeros(rows, dtype=np.int64),
    )  # fmt: skip


def prefix_rows(
    model: Path, vocab: int, backend: str, dtype: str, args: argparse.Namespace
) -> list[dict[str, object]]:
    """A backend's step with shared prefixes against without, per group size and prompt:reply ratio; ratio 0 is
    10:1 with every row's prompt its own, where the setting finds nothing to share."""
    rows: list[dict[str, object]] = []
    for group_size in (8, 16):
        for ratio in (0, 1, 10, 50):
            prompt = (ratio or 10) * args.reply
            batch = prefix_batch(
                args.prefix_groups, group_size, prompt, args.reply, vocab, shared=ratio > 0
            )
            timings = {}
            for share in (False, True):
                settings = RunSettings(
                    model, 10, groups_per_batch=1, backend=backend, learning_rate=1e-5, share_prefixes=share, dtype=dtype,
                    micro_batch_tokens=args.micro_batch_tokens,
                )  # fmt: skip
                seconds, cpu_seconds, metrics = timed_steps(select_backend(settings), batch, args)
                timings[share] = (
                    statistics.median(seconds),
                    statistics.median(cpu_seconds),
                    metrics,
                )
                gc.collect()
            (step, cpu, plain_metrics), (shared_step, shared_cpu, metrics) = (
                timings[False],
                timings[True],
            )
            rows.append({
                "backend": backend, "dtype": dtype, "group_size": group_size, "prompt_to_reply": f"{ratio}:1" if ratio else "none",
                "tokens": batch.token_count,
                "tokens_computed": int(metrics["tokens_computed"]), "unshared_ms": round(step * 1000, 1),
                "shared_ms": round(shared_step * 1000, 1), "speedup": round(step / shared_step, 2),
                "cpu_speedup": round(cpu / shared_cpu, 2),
                "loss_diff": abs(metrics["policy_loss"] - plain_metrics["policy_loss"]),
            })  # fmt: skip
    return rows


def print_prefix_rows(rows: list[dict[str, object]]) -> None:
    print(
        f"{'backend':<8} {'dtype':<9} {'G':>3} {'P:R':>5} {'tokens':>7} {'computed':>9} {'unshared ms':>12} {'shared ms':>10} {'speedup':>8} {'CPU speedup':>12}"
    )
    for row in rows:
        print(
            f"{row['backend']:<8} {row['dtype']:<9} {row['group_size']:>3} {row['prompt_to_reply']:>5} {row['tokens']:>7} {row['tokens_computed']:>9} "
            f"{row['unshared_ms']:>12} {row['shared_ms']:>10} {row['speedup']:>7}x {row['cpu_speedup']:>11}x"
        )


def timed_steps(
    backend, batch: TrainingBatch, args: argparse.Namespace
) -> tuple[list[float], list[float], dict[str, float]]:
    """Wall and process CPU seconds of each timed step after the warm-up ones, and the last step's metrics."""
    for _ in range(args.warmup):
        backend.train_step(batch)
    seconds, cpu_seconds = [], []
    metrics: dict[str, float] = {}
    for _ in range(args.steps):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        started, cpu_started = time.perf_counter(), time.process_time()
        metrics = backend.train_step(batch)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
        cpu_seconds.append(time.process_time() - cpu_started)
    return seconds, cpu_seconds, metrics


def policy_module(backend) -> torch.nn.Module:
    """The model whose forward the profile times: the engine's FSDP module, or the loop's model."""
    if backend.name == "fsdp":
        return backend.policy.engine.module
    return backend.model


def profile_step(backend, batch: TrainingBatch) -> dict[str, float]:
    """One step, split into the model's forward, autograd's backward, the optimizer, and the rest.

    `other_ms` is everything a step spends outside those three: turning the batch into the
    engine's layout, micro-batch planning, log-probs and entropy from the logits, the loss,
    metrics and their device syncs. On a GPU every aten op is at least one kernel launch from
    the host, so `aten_ops` counts the host's work independently of the device.
    """
    spent = {"forward_ms": 0.0, "backward_ms": 0.0, "optimizer_ms": 0.0}
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    starts: dict[str, float] = {}

    def begin(key: str) -> None:
        sync()
        starts[key] = time.perf_counter()

    def end(key: str) -> None:
        sync()
        spent[key] += (time.perf_counter() - starts.pop(key)) * 1000

    module = policy_module(backend)
    hooks = [
        module.register_forward_pre_hook(lambda *_: begin("forward_ms")),
        module.register_forward_hook(lambda *_: end("forward_ms")),
        register_optimizer_step_pre_hook(lambda *_: begin("optimizer_ms")),
        register_optimizer_step_post_hook(lambda *_: end("optimizer_ms")),
    ]
    autograd_backward = torch.autograd.backward

    def timed_backward(*args, **kwargs):
        begin("backward_ms")
        try:
            return autograd_backward(*args, **kwargs)
        finally:
            end("backward_ms")

    torch.autograd.backward = timed_backward
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
            sync()
            started = time.perf_counter()
            backend.train_step(batch)
            sync()
            step_ms = (time.perf_counter() - started) * 1000
    finally:
        torch.autograd.backward = autograd_backward
        for hook in hooks:
            hook.remove()
    aten_ops = sum(
        event.count for event in profiler.key_averages() if event.key.startswith("aten::")
    )
    spent["other_ms"] = step_ms - sum(spent.values())
    return {key: round(value, 1) for key, value in spent.items()} | {"aten_ops": aten_ops}


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

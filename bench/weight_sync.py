"""Weight sync of a LoRA adapter against a full-weight push, into one real vLLM replica, in one run.

Generates a Qwen2-shaped model, starts one vLLM that serves it with LoRA enabled, and
times the trainer's weight sync (`WeightSync`, no ingest) after each of a few update
steps of the `cpu` backend: first training the whole model, then a LoRA adapter of the
given rank on every linear layer. Push is writing the folder and the replica loading it
(`reload_weights`, or unload and load of the adapter); verify is the probe on both
sides. Prints a table, the full/LoRA ratio of each phase, and one JSON line.

    .venv/bin/python bench/weight_sync.py                           # ~100M parameters, a few minutes on 2 cores
    .venv/bin/python bench/weight_sync.py --hidden 128 --layers 2   # the tiny model
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch

from parity.services.inference.cpu_build import cpu_layout
from parity.services.inference.tiny_model import TinyModelSpec, generate_tiny_model
from parity.services.inference.vllm_launcher import (
    VllmLaunchConfig,
    VllmServer,
    vllm_python,
)
from parity.services.trainer.backends.cpu import CpuBackend
from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.replicas import VllmReplica
from parity.services.trainer.run_settings import RunSettings
from parity.services.trainer.weight_sync import WeightSync, probe_tokens

PHASES = ("push", "verify", "total")


def rewarded_batch() -> TrainingBatch:
    """One prompt, two rollouts rewarded and two not: enough for an update that moves every weight."""
    ids = torch.tensor([[1, 2, 3, 4, 100, 100, 100]] * 2 + [[1, 2, 3, 4, 200, 200, 200]] * 2)
    mask = torch.zeros(4, 6)
    mask[:, 3:] = 1
    rewards = torch.zeros(4, 6)
    rewards[:2, -1] = 1.0
    return TrainingBatch(
        input_ids=ids, attention_mask=torch.ones_like(ids), response_mask=mask, rollout_logprobs=-6.9 * mask,
        token_rewards=rewards, group_index=np.array(["t"] * 4, dtype=object), rewards=np.array([1.0, 1.0, 0.0, 0.0]),
        policy_versions=np.zeros(4, dtype=np.int64),
    )  # fmt: skip


def folder_mb(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file()) / 2**20


def measure(
    settings: RunSettings, replica: VllmReplica, work: Path, steps: int
) -> dict[str, float]:
    backend = CpuBackend(settings)
    sync = WeightSync([replica], work / "weights", probe_tokens(1024))
    # The first sync of each mode carries one-time costs (the first adapter a vLLM serves); it is not timed.
    sync.sync(backend, policy_version=0)
    timings: dict[str, list[float]] = {phase: [] for phase in PHASES}
    diffs = []
    for version in range(1, steps + 1):
        backend.train_step(rewarded_batch())
        result = sync.sync(backend, policy_version=version)
        diffs.append(result.max_logprob_diff)
        for phase in PHASES:
            timings[phase].append(result.durations_s[phase])
    row = {phase: statistics.median(values) for phase, values in timings.items()}
    row["mb"] = folder_mb(work / "weights" / f"policy-v{steps:06d}")
    row["max_probe_diff"] = max(diffs)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument(
        "--heads", type=int, default=16, help="attention heads; head_dim is hidden / heads"
    )
    parser.add_argument("--rank", type=int, default=8, help="the LoRA adapter's rank")
    parser.add_argument(
        "--steps", type=int, default=5, help="timed syncs per mode, each after an update"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        spec = TinyModelSpec(
            hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
            num_key_value_heads=max(1, args.heads // 4), intermediate_size=args.hidden * 11 // 4,
        )  # fmt: skip
        model = generate_tiny_model(work / "model", spec)
        config = VllmLaunchConfig(model_path=model, port=_free_port(), served_model_name="bench", lora_rank=args.rank,
                                  log_path=work / "vllm.log", startup_timeout_s=600)  # fmt: skip
        layout = cpu_layout(vllm_python())
        config.worker_cpus = layout.worker_bind if layout else None
        with VllmServer(config) as server:
            replica = VllmReplica(server.base_url)
            # The adapter first: it is trained on the base weights, which the full pushes then replace.
            lora = measure(RunSettings(model, 100, groups_per_batch=1, backend="cpu", learning_rate=1e-3, lora_rank=args.rank), replica,
                           work / "lora", args.steps)  # fmt: skip
            full = measure(
                RunSettings(model, 100, groups_per_batch=1, backend="cpu", learning_rate=1e-4),
                replica,
                work / "full",
                args.steps,
            )
            rows = {"full": full, "lora": lora}
        parameters = sum(
            p.numel()
            for p in CpuBackend(RunSettings(model, 1, groups_per_batch=1)).model.parameters()
        )
    print(f"model: hidden {args.hidden}, {args.layers} layers, {parameters / 1e6:.1f}M parameters; "
          f"LoRA rank {args.rank} on every linear layer; median of {args.steps} syncs")  # fmt: skip
    print(
        f"{'sync':<6} {'pushed MB':>10} {'push s':>8} {'verify s':>9} {'total s':>8} {'probe diff':>11}"
    )
    for name, row in rows.items():
        print(f"{name:<6} {row['mb']:>10.2f} {row['push']:>8.3f} {row['verify']:>9.3f} {row['total']:>8.3f} "
              f"{row['max_probe_diff']:>11.2e}")  # fmt: skip
    ratios = {phase: rows["full"][phase] / rows["lora"][phase] for phase in ("mb", *PHASES)}
    print(
        f"{'full/lora':<6} {ratios['mb']:>10.1f} {ratios['push']:>8.1f} {ratios['verify']:>9.1f} {ratios['total']:>8.1f}"
    )
    print(
        json.dumps(
            {"parameters": parameters, "rank": args.rank, "rows": rows, "full_over_lora": ratios}
        )
    )


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":
    main()

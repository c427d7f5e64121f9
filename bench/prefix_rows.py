"""`bench/trainer.py --prefix-rows`: a backend's step with shared prefixes against without, on GRPO groups whose
rows share a prompt."""

from __future__ import annotations

import argparse
import gc
import statistics
from pathlib import Path

import numpy as np
import torch
from step_timing import timed_steps

from parity.services.trainer.backends import select_backend
from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.run_settings import RunSettings


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

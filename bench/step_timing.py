"""How long a backend's training step takes: timed steps after warm-up ones, and one step split into the
model's forward, autograd's backward, the optimizer and the rest."""

from __future__ import annotations

import argparse
import time

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from parity.services.trainer.batch_tensors import TrainingBatch

# The step profile's figures (milliseconds, and aten ops dispatched).
PROFILE_KEYS = ("forward_ms", "backward_ms", "optimizer_ms", "other_ms", "aten_ops")


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

"""The cpu backend's shared prefixes: computed once, and the update is the unshared path's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import MistralConfig

from parity.services.trainer.backends import cpu, select_backend
from parity.services.trainer.backends.prefix_tree import (
    MIN_SHARED_TOKENS,
    PrefixCluster,
    PrefixTreeMismatch,
)
from parity.services.trainer.backends.shared_prefix import shares_exactly
from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.run_settings import RunSettings

# Every loss term and mean the step reports; each must be the unshared computation's.
COMPARED = (
    "policy_loss",
    "kl",
    "loss",
    "entropy",
    "clip_fraction",
    "ppo_kl",
    "tis_weight_mean",
    "rollout_logprob_diff",
    "grad_norm",
)


def sharing_batch(seed: int = 0) -> TrainingBatch:
    """What an agent's step holds: a GRPO group of replies to one long prompt, a session whose later
    turn repeats its earlier one (sampled tokens inside the shared prefix), and a row sharing nothing."""
    generator = torch.Generator().manual_seed(seed)

    def tokens(n: int) -> list[int]:
        return torch.randint(5, 250, (n,), generator=generator).tolist()

    prompt, turn_prompt, turn_reply = (
        tokens(MIN_SHARED_TOKENS + 6),
        tokens(MIN_SHARED_TOKENS),
        tokens(5),
    )
    rows: list[
        tuple[list[int], list[int]]
    ] = []  # ids, and the positions t whose next token was sampled
    for length in (3, 7, 9, 5):
        reply = tokens(length)
        rows.append((prompt + reply, list(range(len(prompt) - 1, len(prompt) + length - 1))))
    first_turn = turn_prompt + turn_reply
    first_sampled = list(range(len(turn_prompt) - 1, len(first_turn) - 1))
    second = first_turn + tokens(4) + tokens(6)
    rows.append((first_turn, first_sampled))
    rows.append((second, first_sampled + list(range(len(first_turn) + 3, len(second) - 1))))
    rows.append((tokens(20), list(range(9, 19))))
    length = max(len(ids) for ids, _ in rows)
    size = len(rows)
    ids, attention = (
        torch.zeros(size, length, dtype=torch.long),
        torch.zeros(size, length, dtype=torch.long),
    )
    mask, token_rewards = torch.zeros(size, length - 1), torch.zeros(size, length - 1)
    returns = np.array([1.0, 0.0, 1.0, 0.0, 0.5, 1.0, 0.0])
    for row, (row_ids, sampled) in enumerate(rows):
        ids[row, : len(row_ids)] = torch.tensor(row_ids)
        attention[row, : len(row_ids)] = 1
        mask[row, sampled] = 1
        token_rewards[row, sampled[-1]] = returns[row]
    return TrainingBatch(
        input_ids=ids, attention_mask=attention, response_mask=mask,
        rollout_logprobs=-torch.rand(size, length - 1, generator=generator) * 8 * mask, token_rewards=token_rewards,
        group_index=np.array(["a", "a", "a", "a", "s", "s", "x"], dtype=object), rewards=returns,
        policy_versions=np.zeros(size, dtype=np.int64),
    )  # fmt: skip


def cpu_backend(settings: RunSettings) -> cpu.CpuBackend:
    backend = select_backend(settings)
    assert isinstance(backend, cpu.CpuBackend)
    return backend


def step(
    model_dir: Path, batch: TrainingBatch, share: bool, learning_rate: float = 1e-3, **settings: Any
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    backend = cpu_backend(RunSettings(
        model_dir, 10, groups_per_batch=1, backend="cpu", learning_rate=learning_rate, ppo_epochs=2, kl_coef=0.1,
        max_grad_norm=1e6, share_prefixes=share, **settings,
    ))  # fmt: skip
    metrics = backend.train_step(batch)
    # The second epoch's gradients: after one update, so the PPO ratio and the clip are in play.
    return metrics, {
        name: p.grad.clone() for name, p in backend.model.named_parameters() if p.grad is not None
    }


def assert_same_update(
    shared,
    unshared,
    rtol: float,
    atol: float,
    grad_rtol: float | None = None,
    compared: tuple[str, ...] = COMPARED,
) -> None:
    (metrics, grads), (expected_metrics, expected_grads) = shared, unshared
    grad_rtol = rtol if grad_rtol is None else grad_rtol
    for key in compared:
        assert metrics[key] == pytest.approx(expected_metrics[key], rel=rtol, abs=atol), key
    assert grads.keys() == expected_grads.keys() and grads
    for name, grad in grads.items():
        expected = expected_grads[name]
        # Relative to the parameter's gradient as a whole: single entries near zero carry no meaning.
        assert float((grad - expected).norm()) <= grad_rtol * float(expected.norm()) + atol, name


@pytest.mark.parametrize("budget", [cpu.MICRO_BATCH_TOKENS, 24])
def test_sharing_gives_the_unshared_loss_metrics_and_gradients_in_float32(
    tiny_model_dir, monkeypatch, budget
) -> None:
    # A 24-position budget splits a cluster's branches over micro-batches, which share the prefix's one forward.
    monkeypatch.setattr(cpu, "MICRO_BATCH_TOKENS", budget)
    batch = sharing_batch()
    shared, unshared = step(tiny_model_dir, batch, True), step(tiny_model_dir, batch, False)
    assert shared[0]["tokens_trained"] == unshared[0]["tokens_computed"] == batch.token_count
    prompt, first_turn_prefix = MIN_SHARED_TOKENS + 6, MIN_SHARED_TOKENS + 4
    assert shared[0]["tokens_computed"] == batch.token_count - 3 * prompt - first_turn_prefix
    # Gradients sum the prefix's share in another order than the unshared rows do, and the CPU's kernels and their
    # thread count order those sums too: up to 1.1e-5 of a gradient's norm seen on a Xeon, 3.6e-5 on an EPYC.
    assert_same_update(shared, unshared, rtol=1e-5, atol=1e-7, grad_rtol=1e-4)


def test_sharing_gives_the_unshared_update_in_bfloat16_and_on_a_tied_head(tied_model_dir) -> None:
    batch = sharing_batch(1)
    shared, unshared = (
        step(tied_model_dir, batch, share, dtype="bfloat16") for share in (True, False)
    )
    # bf16 rounds each matmul's output to 8 bits of mantissa; the two paths round different but equal
    # sums (the prefix computed alone against inside each row), so they agree to a few of its steps.
    eps = torch.finfo(torch.bfloat16).eps
    assert_same_update(shared, unshared, rtol=8 * eps, atol=eps)


def test_sharing_gives_the_unshared_update_with_lora(tiny_model_dir) -> None:
    batch = sharing_batch(2)
    shared, unshared = (step(tiny_model_dir, batch, share, lora_rank=4) for share in (True, False))
    assert all("lora_" in name for name in shared[1])
    assert_same_update(shared, unshared, rtol=1e-5, atol=1e-7)


def test_a_batch_sharing_nothing_runs_the_unshared_path(tiny_model_dir, monkeypatch) -> None:
    batch = sharing_batch()
    alone = batch.rows(torch.tensor([0, 4, 6]))  # one row of each kind: no prefix is shared
    monkeypatch.setattr(cpu, "SharedPrefix", None)  # any use of the shared path would fail
    metrics, _ = step(tiny_model_dir, alone, True)
    assert metrics["tokens_computed"] == metrics["tokens_trained"] == alone.token_count


def test_a_prefix_tree_that_disagrees_with_the_samples_is_refused(
    tiny_model_dir, monkeypatch
) -> None:
    batch = sharing_batch()
    prompt = tuple(batch.input_ids[0, : MIN_SHARED_TOKENS + 6].tolist())
    wrong = PrefixCluster(
        (0, 1, 5), prompt
    )  # row 5 is a session turn, which does not start with the prompt
    monkeypatch.setattr(cpu, "shared_prefix_clusters", lambda *_: [wrong])
    backend = cpu_backend(
        RunSettings(tiny_model_dir, 10, groups_per_batch=1, backend="cpu", learning_rate=1e-3)
    )
    before = [p.detach().clone() for p in backend.model.parameters()]
    with pytest.raises(
        PrefixTreeMismatch, match="row 5 differs from its cluster's prefix at token 0"
    ):
        backend.train_step(batch)
    assert all(torch.equal(a, b) for a, b in zip(before, backend.model.parameters(), strict=True))


def test_sharing_is_off_where_it_would_not_be_exact(tiny_model_dir) -> None:
    # A sliding-window layer caches only its window: branches past it would see less than their whole rows.
    assert not shares_exactly(MistralConfig(num_hidden_layers=2, sliding_window=16))
    assert shares_exactly(MistralConfig(num_hidden_layers=2, sliding_window=None))

    def backend(**settings: Any) -> cpu.CpuBackend:
        return cpu_backend(
            RunSettings(tiny_model_dir, 10, groups_per_batch=1, backend="cpu", **settings)
        )

    assert backend().shares_prefixes and not backend(share_prefixes=False).shares_prefixes
    # Dropout draws a mask per row; a prefix computed once would share one.
    assert not backend(lora_rank=4, lora_dropout=0.1).shares_prefixes

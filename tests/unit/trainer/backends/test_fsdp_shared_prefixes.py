"""The fsdp backend's prefix trees: each shared prefix computed once in verl's engine, and the update the unshared one."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoConfig, BloomConfig

from parity.services.trainer.backends import fsdp, select_backend
from parity.services.trainer.backends.fsdp import FsdpBackend
from parity.services.trainer.backends.prefix_tree import MIN_SHARED_TOKENS
from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.compute_defaults import AttentionLayout, attention_layout
from parity.services.trainer.run_settings import RunSettings
from tests.unit.trainer.backends.test_shared_prefixes import (
    COMPARED,
    assert_same_update,
    sharing_batch,
)

pytestmark = pytest.mark.skipif(
    attention_layout(torch.cuda.is_available()).padding_free,
    reason="flash-attn's padding-free micro-batches take no tree mask",
)
# fsdp averages clip fraction and entropy per micro-batch, as verl does, and trees change what a
# micro-batch holds; the loss terms and the gradient are the batch's own.
TOTALS = tuple(
    key
    for key in COMPARED
    if key not in ("entropy", "clip_fraction", "ppo_kl", "tis_weight_mean", "rollout_logprob_diff")
)


def backend(
    model_dir: Path, share: bool, learning_rate: float = 1e-3, **settings: Any
) -> FsdpBackend:
    chosen = select_backend(RunSettings(
        model_dir, 10, groups_per_batch=1, backend="fsdp", learning_rate=learning_rate, ppo_epochs=2, kl_coef=0.1,
        max_grad_norm=1e6, share_prefixes=share, **settings,
    ))  # fmt: skip
    assert isinstance(chosen, FsdpBackend)
    return chosen


def step(
    model_dir: Path, batch: TrainingBatch, share: bool, **settings: Any
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    trainer = backend(model_dir, share, **settings)
    engine, grads = trainer.policy.engine, dict[str, torch.Tensor]()
    optimizer_step = engine.optimizer_step

    def keeping_gradients() -> float:
        # The last epoch's gradients, as the optimizer gets them (verl's engine zeroes them once the step is done).
        grads.clear()
        for name, param in engine.module.named_parameters():
            if param.grad is not None:
                grads[name] = (
                    (param.grad.full_tensor() if hasattr(param.grad, "full_tensor") else param.grad)
                    .detach()
                    .clone()
                )
        return optimizer_step()

    engine.optimizer_step = keeping_gradients
    return trainer.train_step(batch), grads


@pytest.mark.parametrize("budget", [16384, 90])
def test_prefix_trees_give_the_unshared_loss_and_gradients_in_float32(
    tiny_model_dir, budget
) -> None:
    # A 90-token budget splits the group's four rows over two trees, each with its prefix, and the batch over micro-batches.
    batch = sharing_batch()
    shared, unshared = (
        step(tiny_model_dir, batch, share, micro_batch_tokens=budget) for share in (True, False)
    )
    assert unshared[0]["tokens_computed"] == shared[0]["tokens_trained"] == batch.token_count
    prompt, turn = MIN_SHARED_TOKENS + 6, MIN_SHARED_TOKENS
    # A tree keeps its prefix once; each of its rows repeats the prefix's last token. The session's turns share
    # their prompt up to the first sampled token.
    saved = 3 * prompt - 3 + turn - 1 if budget == 16384 else 2 * prompt - 2 + turn - 1
    assert shared[0]["tokens_computed"] == batch.token_count - saved
    assert_same_update(shared, unshared, rtol=1e-5, atol=1e-7, grad_rtol=1e-4, compared=TOTALS)


def test_prefix_trees_give_the_unshared_update_in_bfloat16_on_a_tied_head(tied_model_dir) -> None:
    batch = sharing_batch(1)
    shared, unshared = (
        step(tied_model_dir, batch, share, dtype="bfloat16") for share in (True, False)
    )
    eps = torch.finfo(torch.bfloat16).eps
    assert_same_update(shared, unshared, rtol=8 * eps, atol=eps, compared=TOTALS)


def test_prefix_trees_give_the_unshared_update_with_lora(tiny_model_dir) -> None:
    batch = sharing_batch(2)
    shared, unshared = (step(tiny_model_dir, batch, share, lora_rank=4) for share in (True, False))
    assert shared[1] and all("lora_" in name for name in shared[1])
    assert_same_update(shared, unshared, rtol=1e-5, atol=1e-7, compared=TOTALS)


def test_a_batch_sharing_nothing_trains_as_it_is(tiny_model_dir) -> None:
    alone = sharing_batch().rows(torch.tensor([0, 4, 6]))
    trainer = backend(tiny_model_dir, True)
    assert trainer.shares_prefixes and trainer._prefix_trees(alone) is None
    metrics = trainer.train_step(alone)
    assert metrics["tokens_computed"] == metrics["tokens_trained"] == alone.token_count


def test_prefix_trees_are_off_where_they_would_not_give_the_unshared_update(
    tiny_model_dir, monkeypatch
) -> None:
    assert not backend(tiny_model_dir, False).shares_prefixes
    # A per-sample mean weighs a tree's rows as one sample; dropout would draw one mask for a prefix's rows.
    assert not backend(tiny_model_dir, True, loss_agg_mode="seq-mean-token-mean").shares_prefixes
    assert not backend(tiny_model_dir, True, lora_rank=4, lora_dropout=0.1).shares_prefixes
    trainer = backend(tiny_model_dir, True)
    assert trainer.shares_prefixes
    # flash-attn's padding-free micro-batches find rows from position resets and take no mask.
    monkeypatch.setattr(
        fsdp,
        "attention_layout",
        lambda on_gpu: AttentionLayout("flash_attention_2", padding_free=True),
    )
    assert not trainer._sharing_is_exact()


def test_models_with_dropout_or_positions_not_from_position_ids_train_unshared(
    tiny_model_dir, tmp_path, monkeypatch
) -> None:
    folder = tmp_path / "dropout"
    shutil.copytree(tiny_model_dir, folder)
    config = AutoConfig.from_pretrained(folder)
    config.attention_dropout = 0.1
    config.save_pretrained(folder)
    assert not backend(folder, True).shares_prefixes
    # ALiBi (Bloom) biases attention by packed offsets, which a tree's rows do not share with their whole rows.
    trainer = backend(tiny_model_dir, True)
    monkeypatch.setattr(AutoConfig, "from_pretrained", lambda *_: BloomConfig(n_layer=2))
    assert not trainer._sharing_is_exact()

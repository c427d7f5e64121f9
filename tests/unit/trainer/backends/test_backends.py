"""One conformance suite for every training backend; fsdp runs on the GPU where there is one, else on CPU.

Every test runs on the tiny model twice: untied, and with its output head tied to its
input embeddings (as Qwen2.5 0.5B-3B, Llama 3.2 1B/3B and Gemma are).
"""

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from parity.services.trainer.backends import select_backend
from parity.services.trainer.backends.cpu import CpuBackend
from parity.services.trainer.batch_tensors import TrainingBatch
from parity.services.trainer.run_settings import RunSettings
from tests.training_batch_factory import rewarded_batch

BACKENDS = [
    pytest.param("cpu", id="cpu"),
    pytest.param("fsdp", id="fsdp"),
]


def generated_model(request, layout: str) -> Path:
    return request.getfixturevalue("tied_model_dir" if layout == "tied" else "tiny_model_dir")


@pytest.fixture(params=["untied", "tied"])
def model_dir(request) -> Path:
    return generated_model(request, request.param)


def head_and_embeddings(directory: Path) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The output head (None when a tied checkpoint leaves it out) and the input embeddings of a saved model."""
    from safetensors.torch import load_file

    state = load_file(directory / "model.safetensors")
    return state.get("lm_head.weight"), state["model.embed_tokens.weight"]


@pytest.mark.parametrize("name", BACKENDS)
def test_training_moves_probability_towards_rewarded_tokens(name, model_dir) -> None:
    backend = select_backend(
        RunSettings(model_dir, 10, groups_per_batch=1, backend=name, learning_rate=1e-2)
    )
    good, bad = 100, 200
    # The first answer token after the prompt, where the batch rewards `good` and penalises `bad`.
    probes = ([1, 2, 3, 4, good], [1, 2, 3, 4, bad])
    before = [backend.probe_logprobs(probe)[-1] for probe in probes]
    for _ in range(3):
        metrics = backend.train_step(rewarded_batch(good, bad))
    after = [backend.probe_logprobs(probe)[-1] for probe in probes]
    assert after[0] > before[0] + 0.5 and after[1] < before[1]
    assert {
        "policy_loss",
        "entropy",
        "grad_norm",
        "clip_fraction",
        "tokens_per_s",
    } <= metrics.keys()


@pytest.mark.parametrize("name", BACKENDS)
def test_saved_weights_load_in_transformers_and_state_resumes_exactly(
    name, model_dir, tmp_path
) -> None:
    from transformers import AutoModelForCausalLM

    settings = RunSettings(model_dir, 10, groups_per_batch=1, backend=name, learning_rate=1e-2)
    backend = select_backend(settings)
    backend.train_step(rewarded_batch(100, 200))
    backend.save_state(tmp_path / "state")
    # vLLM's reload repacks the head only from a tensor of its own, so a tied head is written out as a copy.
    head, embeddings = head_and_embeddings(tmp_path / "state")
    tied = head_and_embeddings(model_dir)[0] is None
    assert head is not None and torch.equal(head, embeddings) == tied
    probe = [1, 2, 3, 4, 100, 200]
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "state", dtype=torch.float32)
    assert (reloaded.lm_head.weight is reloaded.model.embed_tokens.weight) == tied
    with torch.no_grad():
        logits = reloaded(torch.tensor([probe])).logits[0, :-1]
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(probe[1:])[:, None])[:, 0]
    assert np.allclose(backend.probe_logprobs(probe), expected.tolist(), atol=1e-5)
    # The same next step from the restored state gives the same weights.
    resumed = select_backend(settings)
    resumed.load_state(tmp_path / "state")
    backend.train_step(rewarded_batch(100, 200))
    resumed.train_step(rewarded_batch(100, 200))
    assert np.allclose(backend.probe_logprobs(probe), resumed.probe_logprobs(probe), atol=1e-6)


def ragged_batch() -> TrainingBatch:
    """Rows of different lengths, right-padded, with a multi-turn mask: padding and masks must line up in every backend."""
    rows = [
        [1, 2, 3, 100, 100, 7, 8, 100],
        [1, 2, 3, 100, 100],
        [1, 2, 3, 200, 200, 7, 8, 200],
        [1, 2, 3, 200],
    ]
    sampled = [[3, 4, 7], [3, 4], [3, 4, 7], [3]]  # positions t whose next token the policy sampled
    length = max(map(len, rows))
    batch = rewarded_batch(100, 200)
    ids, attention = (
        torch.zeros(4, length, dtype=torch.long),
        torch.zeros(4, length, dtype=torch.long),
    )
    mask, rewards = torch.zeros(4, length - 1), torch.zeros(4, length - 1)
    for row, (tokens, picks) in enumerate(zip(rows, sampled, strict=True)):
        ids[row, : len(tokens)] = torch.tensor(tokens)
        attention[row, : len(tokens)] = 1
        mask[row, [p - 1 for p in picks]] = 1
        rewards[row, picks[-1] - 1] = batch.rewards[row]
    return TrainingBatch(
        input_ids=ids, attention_mask=attention, response_mask=mask, rollout_logprobs=torch.full_like(mask, -6.9) * mask,
        token_rewards=rewards, group_index=batch.group_index, rewards=batch.rewards, policy_versions=batch.policy_versions,
    )  # fmt: skip


# How closely the backends agree per dtype: relative and absolute on the loss terms, absolute on
# probe logprobs. float32 to rounding; in bfloat16 verl's engine takes the log-softmax of bf16
# logits (`logprobs_from_logits` without flash-attn), which moves kl by about 2%, a policy loss
# near zero by up to 0.006, and the probe by up to 0.07.
AGREEMENT = {"float32": (1e-3, 1e-6, 1e-4), "bfloat16": (5e-2, 2e-2, 0.15)}


# The head's layout and the dtype are independent: bfloat16 runs on one layout.
@pytest.mark.parametrize(
    ("layout", "dtype"), [("untied", "float32"), ("tied", "float32"), ("untied", "bfloat16")]
)
def test_every_backend_applies_the_same_update(request, layout, dtype) -> None:
    # Same loss, same optimizer: from the same weights, one step on the same ragged batch must agree.
    # An 8-token budget gives fsdp one micro-batch per row, so its loss is summed from normalised shares.
    model_dir = generated_model(request, layout)
    probe = [1, 2, 3, 100, 100, 7, 8, 200]
    results = {}
    for name in ("cpu", "fsdp"):
        settings = RunSettings(
            model_dir, 10, groups_per_batch=1, backend=name, learning_rate=1e-2, ppo_epochs=2, kl_coef=0.1, micro_batch_tokens=8,
            dtype=dtype,
        )  # fmt: skip
        backend = select_backend(settings)
        metrics = backend.train_step(ragged_batch())
        results[name] = (metrics, backend.probe_logprobs(probe))
    (cpu_metrics, cpu_probe), (fsdp_metrics, fsdp_probe) = results["cpu"], results["fsdp"]
    rtol, atol, probe_atol = AGREEMENT[dtype]
    # The loss terms are batch totals; clip fraction and entropy are means that fsdp, like verl, averages per micro-batch.
    for key in ("policy_loss", "kl", "grad_norm", "loss"):
        assert np.isclose(cpu_metrics[key], fsdp_metrics[key], rtol=rtol, atol=atol), key
    assert (
        cpu_metrics["clip_fraction"] > 0
        and fsdp_metrics["clip_fraction"] > 0
        and cpu_metrics["kl"] > 0
    )
    assert np.allclose(cpu_probe, fsdp_probe, atol=probe_atol)


@pytest.mark.parametrize("name", BACKENDS)
def test_bfloat16_computes_in_bfloat16_on_float32_weights(name, tiny_model_dir, tmp_path) -> None:
    settings = RunSettings(tiny_model_dir, 10, groups_per_batch=1, backend=name, learning_rate=1e-2)
    probe = [1, 2, 3, 4, 100, 200, 7, 8]
    exact = select_backend(settings).probe_logprobs(probe)
    backend = select_backend(replace(settings, dtype="bfloat16"))
    # Rounded like bf16 logits, not float32 ones, and no further.
    assert 1e-4 < np.max(np.abs(np.array(backend.probe_logprobs(probe)) - exact)) < 0.1
    backend.train_step(rewarded_batch(100, 200))
    backend.save_weights(tmp_path / "weights")
    # The master weights, which vLLM casts to the dtype it serves, stay float32.
    assert head_and_embeddings(tmp_path / "weights")[1].dtype == torch.float32


@pytest.mark.slow
def test_fsdp_ranks_on_ray_workers_apply_the_same_update(tied_model_dir, tmp_path) -> None:
    # Ray actors (two on CPU, one per GPU) split the batch (and a one-row probe, padded to
    # a row per rank) and must agree with one process. The tied model only: a parameter two
    # modules share, sharded across ranks, is the harder case, and Ray's start-up makes a
    # second variant cost minutes.
    from parity.services.trainer.backends.fsdp import FsdpBackend

    model_dir = tied_model_dir
    workers = torch.cuda.device_count() or 2
    settings: dict[str, Any] = dict(
        learning_rate=1e-2,
        ppo_epochs=2,
        kl_coef=0.1,
        micro_batch_tokens=8,
        ray_workers_per_node=workers,
    )
    probe = [1, 2, 3, 100, 100, 7, 8, 200]
    single = select_backend(
        RunSettings(
            model_dir,
            10,
            groups_per_batch=1,
            backend="cpu",
            **{**settings, "ray_workers_per_node": 0},
        )
    )
    ranks = select_backend(
        RunSettings(model_dir, 10, groups_per_batch=1, backend="fsdp", **settings)
    )
    try:
        assert isinstance(ranks, FsdpBackend) and ranks.ranks == workers
        expected, metrics = single.train_step(ragged_batch()), ranks.train_step(ragged_batch())
        for key in ("policy_loss", "kl", "grad_norm", "loss"):
            assert np.isclose(expected[key], metrics[key], rtol=1e-3, atol=1e-6), key
        assert np.allclose(single.probe_logprobs(probe), ranks.probe_logprobs(probe), atol=1e-4)
        ranks.save_state(tmp_path / "state")
        assert (tmp_path / "state" / "engine").is_dir()
        head, embeddings = head_and_embeddings(tmp_path / "state")
        assert head is not None and torch.equal(head, embeddings)
        ranks.close()
        # The actors and their placement are gone: the same ranks can be placed again.
        again = select_backend(
            RunSettings(model_dir, 10, groups_per_batch=1, backend="fsdp", **settings)
        )
        again.close()
    finally:
        import ray

        ray.shutdown()


def test_the_cpu_loop_computes_the_head_only_where_tokens_were_sampled_with_the_same_numbers(
    model_dir,
) -> None:
    backend = select_backend(
        RunSettings(model_dir, 10, groups_per_batch=1, backend="cpu", learning_rate=1e-2)
    )
    assert isinstance(backend, CpuBackend)
    batch = rewarded_batch(100, 200)
    sampled = batch.response_mask.bool()
    with torch.no_grad():
        everywhere = backend._forward(backend.model, batch.input_ids, batch.attention_mask)
        where_sampled = backend._forward(
            backend.model, batch.input_ids, batch.attention_mask, batch.response_mask
        )
    for full, sliced in zip(everywhere, where_sampled, strict=True):
        assert sliced.shape == full.shape
        torch.testing.assert_close(sliced[sampled], full[sampled], rtol=1e-5, atol=1e-5)


def test_the_cpu_loop_trains_in_micro_batches_to_the_same_weights_as_one_batch(
    model_dir, monkeypatch
) -> None:
    from parity.services.trainer.backends import cpu

    batch = rewarded_batch(100, 200)
    probe = [1, 2, 3, 4, 100, 7, 200]
    results = []
    for budget in (1_000_000, 1):  # the whole batch at once; then every row its own micro-batch
        monkeypatch.setattr(cpu, "MICRO_BATCH_TOKENS", budget)
        backend = select_backend(
            RunSettings(model_dir, 10, groups_per_batch=1, backend="cpu", learning_rate=1e-2)
        )
        metrics = backend.train_step(batch)
        results.append((metrics, backend.probe_logprobs(probe)))
    (whole, whole_probe), (pieces, pieces_probe) = results
    assert (whole["micro_batches"], pieces["micro_batches"]) == (1, batch.size)
    for key in ("policy_loss", "entropy", "grad_norm", "clip_fraction"):
        assert pieces[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-6), key
    np.testing.assert_allclose(pieces_probe, whole_probe, rtol=1e-4, atol=1e-5)

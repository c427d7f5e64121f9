"""LoRA runs on one shared base: each trains its own adapter as a run alone would, and never moves another's."""

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from parity.services.trainer.backends import select_backend
from parity.services.trainer.backends.cpu import CpuBackend
from parity.services.trainer.backends.shared_base import SharedBase
from parity.services.trainer.fair_lock import FairLock
from parity.services.trainer.run_settings import RunSettings
from tests.training_batch_factory import rewarded_batch
from tests.unit.trainer.test_lora import PROBE, adapter_logprobs


def lora_settings(model: Path, seed: int, kl_coef: float = 0.0) -> RunSettings:
    return RunSettings(model, 10, groups_per_batch=1, backend="cpu", learning_rate=1e-2, lora_rank=8, seed=seed,
                       kl_coef=kl_coef)  # fmt: skip


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_runs_on_a_shared_base_train_as_they_would_alone_and_apart(
    tiny_model_dir, tmp_path, kl_coef
) -> None:
    base = SharedBase(tiny_model_dir)
    with base.lock:
        first = select_backend(lora_settings(tiny_model_dir, 1, kl_coef), base)
        second = select_backend(lora_settings(tiny_model_dir, 2, kl_coef), base)
        untouched = np.array(second.probe_logprobs(PROBE))
        for _ in range(2):
            first.train_step(rewarded_batch(100, 200))
        # Training the first adapter moved nothing of the second's policy.
        assert np.allclose(second.probe_logprobs(PROBE), untouched, atol=0)
        second.train_step(rewarded_batch(200, 100))
        trained_first = np.array(first.probe_logprobs(PROBE))
        first.save_weights(tmp_path / "first")
    # The same run alone, from the same seed, on a base of its own: the same policy.
    alone = select_backend(lora_settings(tiny_model_dir, 1, kl_coef))
    for _ in range(2):
        alone.train_step(rewarded_batch(100, 200))
    assert np.allclose(alone.probe_logprobs(PROBE), trained_first, atol=1e-6)
    # What is pushed is peft's folder for one adapter, which loads on the untouched base as the trained policy.
    assert {p.name for p in (tmp_path / "first").iterdir()} == {
        "adapter_config.json",
        "adapter_model.safetensors",
    }
    assert np.allclose(
        adapter_logprobs(tiny_model_dir, tmp_path / "first"), trained_first, atol=1e-5
    )


def test_a_run_resumes_its_adapter_on_a_shared_base_and_a_closed_one_frees_it(
    tiny_model_dir, tmp_path
) -> None:
    base = SharedBase(tiny_model_dir)
    with base.lock:
        first = select_backend(lora_settings(tiny_model_dir, 1), base)
        other = select_backend(lora_settings(tiny_model_dir, 3), base)
        first.train_step(rewarded_batch(100, 200))
        first.save_state(tmp_path / "state")
        resumed = select_backend(lora_settings(tiny_model_dir, 5), base)
        resumed.load_state(tmp_path / "state")
        assert np.allclose(resumed.probe_logprobs(PROBE), first.probe_logprobs(PROBE), atol=1e-6)
    adapters = set(base.model.peft_config)
    assert isinstance(other, CpuBackend)
    other.close()
    assert set(base.model.peft_config) == adapters - {other.adapter}


def test_a_base_is_shared_while_more_than_one_run_is_on_it(tiny_model_dir) -> None:
    base = SharedBase(tiny_model_dir)
    with base.lock:
        first = select_backend(lora_settings(tiny_model_dir, 1), base)
        assert not base.shared
        second = select_backend(lora_settings(tiny_model_dir, 2), base)
        assert base.shared
    second.close()
    # The run left alone takes every turn: its steps reuse the memory they free, so nothing trims it.
    assert not base.shared
    first.close()
    with base.lock:
        select_backend(lora_settings(tiny_model_dir, 3), base)
    # peft kept the closed first adapter (it keeps one active), but no run of its is left.
    assert not base.shared


def test_the_base_is_handed_out_in_the_order_it_was_asked_for() -> None:
    lock = FairLock()
    order: list[int] = []
    lock.acquire()
    threads = []

    def take_turn(n: int) -> None:
        with lock:
            order.append(n)

    for n in range(4):
        thread = threading.Thread(target=take_turn, args=(n,))
        thread.start()
        threads.append(thread)
        # Each asks after the one before it.
        while lock._next_ticket < n + 2:
            time.sleep(0.001)
    time.sleep(0.05)
    lock.release()
    for thread in threads:
        thread.join(5)
    assert order == [0, 1, 2, 3]
    # Each holder knows how long it waited; one that did not wait, about nothing.
    assert lock.acquire() < 0.05 and lock.last_wait_s < 0.05
    lock.release()

"""Weight sync against a real vLLM: the push lands and verifies, and a replica that keeps old
weights is caught by the probe."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from parity.services.trainer.backends.cpu import CpuBackend
from parity.services.trainer.replicas import VllmReplica
from parity.services.trainer.run_settings import RunSettings
from parity.services.trainer.weight_sync import SyncFailed, WeightSync, probe_tokens
from tests.unit.trainer.test_backends import rewarded_batch

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(300)]


@dataclass
class IgnoresReloads(VllmReplica):
    """A replica whose reload is lost (as when it restarted from the original model meanwhile)."""

    def reload_weights(self, weights_dir: Path) -> None:
        return None


def test_pushed_weights_verify_and_stale_ones_are_refused(trainer_vllm, tmp_path) -> None:
    backend = CpuBackend(RunSettings(trainer_vllm.config.model_path, 1, 1, learning_rate=1e-2))
    backend.train_step(rewarded_batch(100, 200))
    sync = WeightSync([VllmReplica(trainer_vllm.base_url)], tmp_path / "weights", probe_tokens(1024))
    result = sync.sync(backend, policy_version=1)
    assert result.verified and result.max_logprob_diff < 1e-4
    assert set(result.durations_s) == {"pause", "push", "verify", "resume", "total"}

    backend.train_step(rewarded_batch(100, 200))
    stale = WeightSync([IgnoresReloads(trainer_vllm.base_url)], tmp_path / "weights", probe_tokens(1024))
    with pytest.raises(SyncFailed, match="probe logprobs differ by"):
        stale.sync(backend, policy_version=2)

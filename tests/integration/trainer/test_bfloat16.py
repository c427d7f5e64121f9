"""Training and serving in bfloat16 on CPU: the trainer computes in bf16 on float32 master weights,
vLLM serves bf16, every sync verifies at the tolerance derived from those dtypes, and the served
policy learns the learning test's task."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from parity.api.trainer.v1 import run_pb2
from parity.services.inference.vllm_launcher import VllmServer
from parity.services.trainer.probe_tolerance import probe_tolerance
from parity.services.trainer.replicas import VllmReplica
from tests.integration.trainer.conftest import serving
from tests.integration.trainer.test_learning import (
    MIN_SHORT_RUN_GAIN,
    MIN_SIGMAS,
    served_rewards,
    train_on_agent_rollouts,
)
from tests.learning_bounds import assert_learned, difference_of_means

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

STEPS = 12


@pytest.fixture(scope="module")
def trainer_vllm(tiny_model_dir, tmp_path_factory) -> Iterator[VllmServer]:
    """The training stack's vLLM, serving bfloat16."""
    with serving(tiny_model_dir, tmp_path_factory, dtype="bfloat16") as server:
        yield server


def test_a_bfloat16_run_learns_and_every_sync_verifies_at_the_derived_tolerance(
    training_stack, tmp_path
) -> None:
    assert VllmReplica(training_stack.vllm.base_url).served_dtype() == "bfloat16"
    before = served_rewards(training_stack.vllm.base_url)
    _, records = train_on_agent_rollouts(
        training_stack, STEPS, tmp_path / "checkpoints", dtype=run_pb2.TRAINING_DTYPE_BFLOAT16
    )
    diffs = [r.values["sync_max_logprob_diff"] for r in records]
    print(f"probe differences per sync: {[round(d, 4) for d in diffs]}")
    # Both sides round like bf16 (float32 on both gives about 1e-6), and stay inside the derived tolerance.
    assert 1e-4 < max(diffs) < probe_tolerance("bfloat16", "bfloat16")
    # Fresh replies before and after, 512 a side. Measured: 0.304 -> 0.522, gain 0.218, SE 0.0075, z 29; passes at
    # z >= 6 and a gain >= 0.05, by chance with probability 1.4e-9.
    gain = difference_of_means(
        before, served_rewards(training_stack.vllm.base_url), "served reward"
    )
    assert_learned(gain, min_z=MIN_SIGMAS, min_gain=MIN_SHORT_RUN_GAIN)

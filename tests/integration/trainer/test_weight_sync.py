"""Weight sync against a real vLLM: every push lands and verifies, on a model whose output head
is tied to its input embeddings as on one that is not, and a replica that keeps old weights is
caught by the probe."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from parity.api.ingest.v1 import ingest_service_pb2 as ingest_pb
from parity.clients import IngestClient
from parity.services.inference.vllm_launcher import VllmServer
from parity.services.trainer.backends import select_backend
from parity.services.trainer.backends.cpu import CpuBackend
from parity.services.trainer.peers import IngestFleet
from parity.services.trainer.probe_tolerance import probe_tolerance
from parity.services.trainer.replicas import VllmReplica
from parity.services.trainer.run_settings import RunSettings
from parity.services.trainer.weight_sync import SyncFailed, WeightSync, probe_tokens
from tests.integration.stack_fixtures import start_ingest
from tests.integration.trainer.conftest import serving
from tests.time_bounds import Stopwatch, bound_s
from tests.training_batch_factory import rewarded_batch

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(300)]


@dataclass
class IgnoresReloads(VllmReplica):
    """A replica whose reload is lost (as when it restarted from the original model meanwhile)."""

    def reload_weights(self, weights_dir: Path) -> None:
        return None


@pytest.fixture(scope="module")
def tied_vllm(tied_model_dir, tmp_path_factory) -> Iterator[VllmServer]:
    with serving(tied_model_dir, tmp_path_factory) as server:
        yield server


@pytest.fixture(params=["untied", "tied"])
def served(request) -> VllmServer:
    return request.getfixturevalue("tied_vllm" if request.param == "tied" else "trainer_vllm")


@pytest.mark.parametrize("name", ["cpu", "fsdp"])
def test_every_sync_moves_the_served_logprobs_onto_the_trainers(served, name, tmp_path) -> None:
    backend = select_backend(
        RunSettings(
            served.config.model_path, 10, groups_per_batch=1, backend=name, learning_rate=1e-2
        )
    )
    replica = VllmReplica(served.base_url)
    probe = probe_tokens(1024)
    sync = WeightSync([replica], tmp_path / "weights", probe)
    # The server may hold an earlier test's weights: start from the model's own.
    sync.sync(backend, policy_version=0)
    for version in range(1, 4):
        before = np.array(replica.prompt_logprobs(probe))
        backend.train_step(rewarded_batch(100, 200))
        result = sync.sync(backend, policy_version=version)
        after = np.array(replica.prompt_logprobs(probe))
        # Verified at the tolerance derived for float32 on both sides, and far inside it (about 1e-6 measured).
        assert result.verified and result.replicas[0].tolerance == probe_tolerance(
            "float32", "float32"
        )
        assert result.max_logprob_diff < 1e-4
        # vLLM serves the update itself: its logprobs moved, onto the trainer's.
        assert np.max(np.abs(after - before)) > 1e-2
        assert np.max(np.abs(after - np.array(backend.probe_logprobs(probe)))) < 1e-4


def test_stale_weights_are_refused_unless_the_tolerance_is_set_above_them(
    trainer_vllm, tmp_path
) -> None:
    backend = CpuBackend(
        RunSettings(trainer_vllm.config.model_path, 1, groups_per_batch=1, learning_rate=1e-2)
    )
    backend.train_step(rewarded_batch(100, 200))
    replica = VllmReplica(trainer_vllm.base_url)
    sync = WeightSync([replica], tmp_path / "weights", probe_tokens(1024))
    result = sync.sync(backend, policy_version=1)
    assert result.verified and result.max_logprob_diff < 1e-4
    assert set(result.durations_s) == {"pause", "push", "verify", "resume", "total"}
    # Its /server_info was read once and is kept for the next syncs.
    info = replica.server_info()
    assert sync.sync(backend, policy_version=1).verified and replica.server_info() is info

    backend.train_step(rewarded_batch(100, 200))
    stale_replica = IgnoresReloads(trainer_vllm.base_url)
    stale = WeightSync([stale_replica], tmp_path / "weights", probe_tokens(1024))
    info = stale_replica.server_info()
    with pytest.raises(SyncFailed, match="probe logprobs differ by"):
        stale.sync(backend, policy_version=2)
    # A replica that failed may have been restarted with other flags: it is asked afresh.
    assert stale_replica.server_info() == info and stale_replica.server_info() is not info
    # An explicit tolerance replaces the derived one.
    lenient = WeightSync(
        [IgnoresReloads(trainer_vllm.base_url)],
        tmp_path / "weights",
        probe_tokens(1024),
        tolerance=10.0,
    )
    assert lenient.sync(backend, policy_version=2).verified


def test_every_ingest_is_paused_versioned_and_resumed_together_and_a_dead_one_fails_the_sync(
    trainer_vllm, module_services, tmp_path
) -> None:
    store = module_services.start("store", "--url", "memory://")
    ingests = [start_ingest(module_services, store.address, trainer_vllm.base_url, tmp_path / f"spool-{n}.db")[0]
               for n in range(2)]  # fmt: skip
    clients = [IngestClient(ingest.address) for ingest in ingests]
    backend = CpuBackend(
        RunSettings(trainer_vllm.config.model_path, 1, groups_per_batch=1, learning_rate=1e-2)
    )
    # One by address, one by a name resolved at each sync, as a Kubernetes headless Service is.
    port = ingests[0].address.rpartition(":")[2]
    fleet = IngestFleet([f"dns:///127.0.0.1:{port}", ingests[1].address])
    sync = WeightSync([VllmReplica(trainer_vllm.base_url)], tmp_path / "weights", probe_tokens(1024), ingests=fleet,
                      drain_timeout_s=5)  # fmt: skip
    with Stopwatch() as synced:
        assert sync.sync(backend, policy_version=7).verified
    stats = [client.get_stats(ingest_pb.GetStatsRequest()) for client in clients]
    assert [(s.policy_version, s.paused) for s in stats] == [(7, False), (7, False)]

    # One ingest goes away for good: the next sync fails once it has not come back within the drain timeout,
    # naming it, and leaves no other paused. Its pause and then its resume each wait the drain timeout for it;
    # the rest of the failed sync is less work than the whole sync above.
    ingests[1].terminate()
    with Stopwatch() as failed, pytest.raises(SyncFailed, match=f"ingest at {ingests[1].address}"):
        sync.sync(backend, policy_version=8)
    assert sync.drain_timeout_s <= failed.seconds <= bound_s(synced.seconds, waits_s=2 * sync.drain_timeout_s), (
        failed.seconds, synced.seconds)  # fmt: skip
    survivor = clients[0].get_stats(ingest_pb.GetStatsRequest())
    assert (survivor.policy_version, survivor.paused) == (7, False)


def test_an_ingest_restarting_during_a_sync_rejoins_it_instead_of_failing_the_run(
    trainer_vllm, module_services, tmp_path
) -> None:
    store = module_services.start("store", "--url", "memory://")
    ingest, http_port = start_ingest(
        module_services, store.address, trainer_vllm.base_url, tmp_path / "spool.db"
    )
    backend = CpuBackend(
        RunSettings(trainer_vllm.config.model_path, 1, groups_per_batch=1, learning_rate=1e-2)
    )
    sync = WeightSync([VllmReplica(trainer_vllm.base_url)], tmp_path / "weights", probe_tokens(1024),
                      ingests=IngestFleet([ingest.address]), drain_timeout_s=60)  # fmt: skip
    assert sync.sync(backend, policy_version=3).verified
    ingest.process.kill()
    ingest.process.wait()

    port = int(ingest.address.rpartition(":")[2])
    with ThreadPoolExecutor(1) as pool:
        restarted = pool.submit(start_ingest, module_services, store.address, trainer_vllm.base_url,
                                tmp_path / "spool.db", port=port, http_port=http_port)  # fmt: skip
        assert sync.sync(backend, policy_version=4).verified
        restarted.result()
    stats = IngestClient(ingest.address).get_stats(ingest_pb.GetStatsRequest())
    assert (stats.policy_version, stats.paused) == (4, False)

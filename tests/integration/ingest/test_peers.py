"""Ingests that start beside others (--peers): they take on the fleet's policy version, start held
while a weight sync has the others paused, and serve once the fleet resumes; a restarted ingest keeps
the version it was given. Real ingest processes in front of the session's real vLLM."""

from __future__ import annotations

import concurrent.futures
import signal
from pathlib import Path

import httpx
import pytest

from parity.api.ingest.v1 import ingest_service_pb2 as pb
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import IngestClient, StoreClient
from tests.conftest import free_port
from tests.integration.service_fixtures import RunningService, ServiceLauncher
from tests.integration.stack_fixtures import start_ingest
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]


def stats(ingest: RunningService) -> pb.GetStatsResponse:
    return IngestClient(ingest.address).get_stats(pb.GetStatsRequest())


def sync_to(ingest: RunningService, version: int) -> None:
    """What the trainer does to every ingest at the end of a weight sync."""
    client = IngestClient(ingest.address)
    client.set_policy_version(pb.SetPolicyVersionRequest(policy_version=version))
    client.resume_traffic(pb.ResumeTrafficRequest())


def ask(http_port: int, model: str, session: str) -> httpx.Response:
    return httpx.post(
        f"http://127.0.0.1:{http_port}/sessions/{session}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}, timeout=60,
    )  # fmt: skip


@pytest.fixture
def launcher(tmp_path: Path):
    launcher = ServiceLauncher(tmp_path)
    yield launcher
    launcher.stop_all()


def test_an_ingest_started_during_a_sync_is_held_at_the_fleet_version_and_serves_once_it_resumes(
    launcher: ServiceLauncher, vllm_server, tmp_path: Path
) -> None:
    store = launcher.start("store", "--url", "memory://")
    first, _ = start_ingest(launcher, store.address, vllm_server.base_url, tmp_path / "first.db")
    sync_to(first, 6)
    IngestClient(first.address).pause_traffic(pb.PauseTrafficRequest(reason="weight sync to 7"))

    joiner, joiner_http = start_ingest(launcher, store.address, vllm_server.base_url, tmp_path / "joiner.db",
                                       "--peers", first.address)  # fmt: skip
    seen = stats(joiner)
    assert (seen.paused, seen.joining, seen.policy_version) == (True, True, 6)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        held = pool.submit(ask, joiner_http, vllm_server.model_name, "joiner-held")
        eventually(lambda: stats(joiner).held == 1, what="the request held at the joiner's gate")
        assert not held.done(), "a request to an ingest held for its fleet's sync waits"
        sync_to(first, 7)
        assert held.result(timeout=30).status_code == 200
    seen = stats(joiner)
    assert (seen.paused, seen.joining, seen.policy_version) == (False, False, 7)
    calls = (
        StoreClient(store.address)
        .list_calls(store_pb.ListCallsRequest(session_id="joiner-held"))
        .calls
    )
    assert [call.policy_version for call in calls] == [7]
    assert '"peers_resumed"' in joiner.log()


def test_the_trainer_resuming_a_held_ingest_lifts_its_hold_and_ingests_restarted_together_do_not_wait_on_each_other(
    launcher: ServiceLauncher, vllm_server, tmp_path: Path
) -> None:
    store = launcher.start("store", "--url", "memory://")
    first, _ = start_ingest(launcher, store.address, vllm_server.base_url, tmp_path / "first.db")
    IngestClient(first.address).pause_traffic(pb.PauseTrafficRequest())
    held, _ = start_ingest(
        launcher,
        store.address,
        vllm_server.base_url,
        tmp_path / "held.db",
        "--peers",
        first.address,
    )
    assert stats(held).joining
    sync_to(held, 2)  # the trainer found it mid-sync: its resume is the newer word
    assert not stats(held).paused and stats(first).paused

    # Two ingests join the paused fleet (each lists itself too, as a headless Service's name would), then the
    # paused peer dies: each sees only the other, joining, and both serve.
    a_port, b_port = free_port(), free_port()
    peers = f"{first.address},127.0.0.1:{a_port},127.0.0.1:{b_port}"
    a, _ = start_ingest(
        launcher,
        store.address,
        vllm_server.base_url,
        tmp_path / "a.db",
        "--peers",
        peers,
        port=a_port,
    )
    b, _ = start_ingest(
        launcher,
        store.address,
        vllm_server.base_url,
        tmp_path / "b.db",
        "--peers",
        peers,
        port=b_port,
    )
    assert stats(a).joining and stats(b).joining
    first.process.send_signal(signal.SIGKILL)
    first.process.wait()
    eventually(
        lambda: not stats(a).paused and not stats(b).paused,
        timeout_s=20,
        what="both joiners serving",
    )


def test_a_restarted_ingest_goes_on_at_the_version_it_was_given(
    launcher: ServiceLauncher, vllm_server, tmp_path: Path
) -> None:
    store = launcher.start("store", "--url", "memory://")
    ingest, http_port = start_ingest(
        launcher, store.address, vllm_server.base_url, tmp_path / "spool.db"
    )
    sync_to(ingest, 5)
    ingest.process.send_signal(signal.SIGKILL)
    ingest.process.wait()

    # On both of its ports, as a restarted pod would: a fresh HTTP port could be the freed gRPC one.
    port = int(ingest.address.rpartition(":")[2])
    restarted, http_port = start_ingest(launcher, store.address, vllm_server.base_url, tmp_path / "spool.db",
                                        port=port, http_port=http_port)  # fmt: skip
    assert stats(restarted).policy_version == 5
    assert ask(http_port, vllm_server.model_name, "after-restart").status_code == 200
    calls = (
        StoreClient(store.address)
        .list_calls(store_pb.ListCallsRequest(session_id="after-restart"))
        .calls
    )
    assert [call.policy_version for call in calls] == [5]

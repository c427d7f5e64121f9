"""A deployed agent's sessions through the SDK: attributed to an end user with tags, given
late feedback with `parity.feedback`, listed and deleted with `parity store`; against a
real ingest, store and vLLM."""

from __future__ import annotations

import subprocess
import sys

import pytest

import parity
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import StoreClient
from tests.integration.stack_fixtures import start_ingest

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


def _parity_store(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "parity.cli", "store", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_sessions_of_an_end_user_get_feedback_and_are_deleted_on_request(
    module_services, vllm_server, tmp_path
) -> None:
    store = module_services.start("store", "--url", f"sqlite:///{tmp_path}/store.db")
    _, http_port = start_ingest(
        module_services, store.address, vllm_server.base_url, tmp_path / "spool.db"
    )
    previous = parity.current_config()
    parity.configure(ingest_url=f"http://127.0.0.1:{http_port}", store_address=store.address)
    try:
        chat = parity.get_chat_client()
        for session_id, user, tags in (
            ("ann-1", "ann", ["prod"]),
            ("ann-2", "ann", ["prod", "beta"]),
            ("bob-1", "bob", ["prod"]),
        ):
            with parity.session(session_id, user=user, tags=tags):
                chat.chat.completions.create(
                    model=vllm_server.model_name,
                    messages=[{"role": "user", "content": "hi"}],
                    max_tokens=2,
                )
        parity.flush()

        listed = _parity_store(
            "sessions", "--address", store.address, "--user", "ann", "--tag", "beta"
        )
        assert listed.returncode == 0, listed.stderr
        assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == ["ann-2"]
        assert "\tann\tbeta,prod" in listed.stdout

        receipt = parity.feedback("ann-1", 1.0, name="thumbs_up", feedback_id="fb-1")
        assert (receipt.feedback_id, receipt.session_id, receipt.status) == (
            "fb-1",
            "ann-1",
            "stored",
        )
        assert (
            parity.feedback("ann-1", 1.0, name="thumbs_up", feedback_id="fb-1").status
            == "duplicate"
        )
        with pytest.raises(parity.FeedbackError, match="fb-1") as conflict:
            parity.feedback("ann-1", 0.0, name="thumbs_up", feedback_id="fb-1")
        assert conflict.value.status_code == 409
        with pytest.raises(ValueError, match="finite"):
            parity.feedback("ann-1", float("nan"))
        [stored] = (
            StoreClient(store.address)
            .list_rewards(store_pb.ListRewardsRequest(session_id="ann-1"))
            .rewards
        )
        assert (stored.reward_id, stored.name, stored.value, stored.source) == (
            "fb-1",
            "thumbs_up",
            1.0,
            "feedback",
        )

        deleted = _parity_store("delete", "--address", store.address, "--user", "ann")
        assert deleted.returncode == 0, deleted.stderr
        assert "deleted 2 sessions, 2 calls and 1 rewards" in deleted.stdout
        again = _parity_store("delete", "--address", store.address, "--user", "ann")
        assert (
            again.returncode == 0
            and "no sessions of end user 'ann': nothing was deleted" in again.stdout
        )

        with pytest.raises(parity.FeedbackError) as gone:
            parity.feedback("ann-2", 1.0, name="resolved")
        assert gone.value.status_code == 404
        remaining = (
            StoreClient(store.address)
            .list_sessions(store_pb.ListSessionsRequest(tags=["prod"]))
            .sessions
        )
        assert [(s.session_id, s.end_user_id) for s in remaining] == [("bob-1", "bob")]
    finally:
        parity.configure(**{k: getattr(previous, k) for k in ("ingest_url", "store_address")})

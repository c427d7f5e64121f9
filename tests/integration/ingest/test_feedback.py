"""Late feedback over ingest's HTTP API (POST /sessions/{id}/feedback) against a real ingest, store and vLLM: kept
as a named Reward, idempotent by its id, refused with the status a sender can act on, and spooled through a store
outage like calls, replayed after the calls before it."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import grpc
import httpx
import pytest

from parity.api.common.v1 import reward_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.store.v1 import store_service_pb2_grpc as store_grpc
from parity.core.session_slug import SessionRef, encode
from parity.services.ingest.capture.spool import Spool
from tests.conftest import free_port
from tests.integration.service_fixtures import RunningService
from tests.integration.stack_fixtures import IngestStack, start_ingest
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(300)]

AGENT_KEY = "agent-token-0123456789abcdef"
READ_KEY = "read-token-0123456789abcdef"
AGENT = {"Authorization": f"Bearer {AGENT_KEY}"}


def feedback(
    http_port: int, session_id: str, body: dict | bytes, headers: dict[str, str] = AGENT
) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    url = f"http://127.0.0.1:{http_port}/sessions/{quote(session_id, safe='')}/feedback"
    return httpx.post(
        url, content=content, headers={"Content-Type": "application/json"} | headers, timeout=60
    )


def chat(http_port: int, slug: str, model: str, headers: dict[str, str] = AGENT) -> None:
    httpx.post(
        f"http://127.0.0.1:{http_port}/sessions/{slug}/v1/chat/completions", headers=headers, timeout=60,
        json={"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    ).raise_for_status()  # fmt: skip


def rewards(store: RunningService, session_id: str) -> list[reward_pb2.Reward]:
    with grpc.insecure_channel(store.address) as channel:
        listed = store_grpc.TokenStoreServiceStub(channel).ListRewards(
            store_pb.ListRewardsRequest(session_id=session_id)
        )
    return list(listed.rewards)


def refused(response: httpx.Response, status: int, param: str | None, fragment: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and fragment in error["message"], error


@pytest.fixture(scope="module")
def stack(module_services, vllm_server, tmp_path_factory) -> IngestStack:
    """An ingest that checks agent keys and answers agents before their calls are stored (durability "after"), so
    feedback sent right after a call finds its session only because ingest flushes the calls first."""
    data = tmp_path_factory.mktemp("feedback")
    (data / "tokens").write_text(f"agent {AGENT_KEY}\nread {READ_KEY}\n")
    store = module_services.start("store", "--url", f"sqlite:///{data}/store.db")
    ingest, http_port = start_ingest(module_services, store.address, vllm_server.base_url, data / "spool.db",
                                     "--auth-tokens-file", str(data / "tokens"), "--durability", "after")  # fmt: skip
    return IngestStack(store, ingest, http_port, data / "spool.db")


def test_feedback_is_stored_as_a_named_reward_and_a_retry_is_a_duplicate(
    stack, vllm_server
) -> None:
    chat(stack.http_port, "fb-stored", vllm_server.model_name)
    body = {
        "value": 1,
        "name": "thumbs_up",
        "feedback_id": "vote-1",
        "metadata": {"channel": "web"},
    }
    first = feedback(stack.http_port, "fb-stored", body)
    assert first.status_code == 200, first.text
    assert first.json() == {"feedback_id": "vote-1", "session_id": "fb-stored", "status": "stored"}
    [stored] = rewards(stack.store, "fb-stored")
    assert (stored.reward_id, stored.name, stored.value, stored.source) == (
        "vote-1",
        "thumbs_up",
        1.0,
        "feedback",
    )
    assert stored.level == reward_pb2.REWARD_LEVEL_TRAJECTORY and dict(stored.metadata) == {
        "channel": "web"
    }
    assert feedback(stack.http_port, "fb-stored", body).json()["status"] == "duplicate"
    refused(
        feedback(stack.http_port, "fb-stored", body | {"value": 0}), 409, "feedback_id", "vote-1"
    )
    # Without an id, ingest makes one: each such request is a signal of its own.
    made = feedback(stack.http_port, "fb-stored", {"value": -0.5, "name": "thumbs_down"}).json()
    assert made["status"] == "stored" and made["feedback_id"] not in ("", "vote-1")
    assert sorted(r.value for r in rewards(stack.store, "fb-stored")) == [-0.5, 1.0]


def test_feedback_on_one_call_scores_that_step(stack, vllm_server) -> None:
    # A session id holding a slash reaches the route percent-encoded, as the SDK sends it.
    session_id = "team/fb-step"
    chat(stack.http_port, encode(SessionRef(session_id)), vllm_server.model_name)
    [call] = stack.wait_for_calls(session_id, 1)
    answer = feedback(
        stack.http_port, session_id, {"value": 0.25, "call_id": call.call_id, "trajectory": ""}
    )
    assert answer.status_code == 200 and answer.json()["session_id"] == session_id, answer.text
    [stored] = rewards(stack.store, session_id)
    assert (stored.level, stored.call_id, stored.value) == (
        reward_pb2.REWARD_LEVEL_STEP,
        call.call_id,
        0.25,
    )
    refused(
        feedback(stack.http_port, session_id, {"value": 1, "call_id": "no-such-call"}),
        404,
        "call_id",
        "no-such-call",
    )


def test_bad_feedback_is_refused_naming_the_field_and_an_unknown_session_is_404(
    stack, vllm_server
) -> None:
    port = stack.http_port
    chat(port, "fb-bad", vllm_server.model_name)
    refused(feedback(port, "fb-bad", b'{"value": NaN}'), 400, "value", "finite")
    refused(feedback(port, "fb-bad", b'{"value": -Infinity}'), 400, "value", "finite")
    refused(feedback(port, "fb-bad", b'{"value": 1e999}'), 400, "value", "finite")
    refused(feedback(port, "fb-bad", {"name": "thumbs_up"}), 400, "value", "required")
    refused(feedback(port, "fb-bad", {"value": "1"}), 400, "value", "finite number")
    refused(
        feedback(port, "fb-bad", {"value": 1, "call_id": 7}), 400, "call_id", "must be a string"
    )
    refused(feedback(port, "fb-bad", {"value": 1, "name": "x" * 65}), 400, "name", "at most 64")
    refused(
        feedback(port, "fb-bad", {"value": 1, "metadata": {"k": 1}}), 400, "metadata", "strings"
    )
    refused(feedback(port, "fb-bad", {"value": 1, "vaule": 1}), 400, "vaule", "unknown field")
    refused(feedback(port, "fb-bad", b"{nope"), 400, None, "not valid JSON")
    refused(feedback(port, "never-recorded", {"value": 1}), 404, "session_id", "never-recorded")
    assert rewards(stack.store, "fb-bad") == []
    url = f"http://127.0.0.1:{port}/sessions/fb-bad/feedback"
    assert httpx.get(url, headers=AGENT).status_code == 405


def test_feedback_takes_the_agent_key(stack) -> None:
    refused(feedback(stack.http_port, "fb-auth", {"value": 1}, headers={}), 401, None, "API key")
    reader = feedback(
        stack.http_port, "fb-auth", {"value": 1}, headers={"Authorization": f"Bearer {READ_KEY}"}
    )
    refused(reader, 403, None, "agent or higher")


def metric(http_port: int, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{http_port}/metrics", timeout=10).text
    [value] = [line.split()[-1] for line in text.splitlines() if line.startswith(f"{name} ")]
    return float(value)


def test_feedback_sent_while_the_store_is_down_is_spooled_and_replayed_after_the_calls(
    module_services, vllm_server, tmp_path: Path
) -> None:  # fmt: skip
    store_port, spool_path, model = free_port(), tmp_path / "spool.db", vllm_server.model_name
    store = module_services.start(
        "store", "--url", f"sqlite:///{tmp_path}/store.db", port=store_port
    )
    ingest, http_port = start_ingest(module_services, store.address, vllm_server.base_url, spool_path,
                                     "--store-timeout-s", "1")  # fmt: skip
    chat(http_port, "before-outage", model)
    store.terminate()
    # A session whose only call waits in the spool with the feedback on it.
    chat(http_port, "during-outage", model)
    sent = [("before-outage", "late-1"), ("during-outage", "late-2"), ("never-recorded", "lost-1")]
    for session_id, feedback_id in sent:
        answer = feedback(
            http_port, session_id, {"value": 1, "name": "resolved", "feedback_id": feedback_id}
        )
        assert answer.status_code == 200 and answer.json()["status"] == "spooled", answer.text
    assert metric(http_port, "parity_ingest_spool_feedback") == 3

    restarted = module_services.start(
        "store", "--url", f"sqlite:///{tmp_path}/store.db", port=store_port
    )
    eventually(lambda: metric(http_port, "parity_ingest_spool_feedback") == 0, timeout_s=60,
               what="the spooled feedback replayed")  # fmt: skip
    for session_id, feedback_id in sent[:2]:
        assert [(r.reward_id, r.name) for r in rewards(restarted, session_id)] == [
            (feedback_id, "resolved")
        ]
    assert metric(http_port, "parity_ingest_refused_feedback") == 1
    assert '"store_refused_feedback"' in ingest.log() and "lost-1" in ingest.log()
    ingest.terminate()
    spool = Spool(spool_path, 1 << 30)
    [(kind, reason, body)] = spool._db.execute("SELECT kind, reason, call FROM refused").fetchall()
    spool.close()
    assert isinstance(reason, str) and isinstance(body, bytes)
    assert kind == "feedback" and reason.startswith("NOT_FOUND") and "never-recorded" in reason
    assert reward_pb2.Reward.FromString(body).reward_id == "lost-1"

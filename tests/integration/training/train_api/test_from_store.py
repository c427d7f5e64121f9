"""A from-store run trains on production sessions by the feedback their end users gave, never on a deleted user's,
ends when none is left, and in continuous mode waits for more."""

from __future__ import annotations

import concurrent.futures

import httpx
import openai
import pytest

import parity
from parity.api.common.v1 import session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import StoreClient, TrainerClient
from tests.integration.trainer.test_promotion import one_reply_agent
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


def production_session(
    deployed_stack, user: str, tags: list[str], signals: dict[str, float]
) -> str:
    """One session of a deployed agent, attributed to `user`, through ingest; then its late feedback."""
    with parity.session(user=user, tags=tags) as session:
        client = openai.OpenAI(
            base_url=parity.session_url(f"http://127.0.0.1:{deployed_stack.http_port}"), api_key="-"
        )
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": f"Help {user}."}],
                                       max_tokens=4, temperature=1.0)  # fmt: skip
    for name, value in signals.items():
        answer = httpx.post(f"http://127.0.0.1:{deployed_stack.http_port}/sessions/{session.session_id}/feedback",
                            json={"value": value, "name": name, "feedback_id": f"{session.session_id}-{name}"}, timeout=30)  # fmt: skip
        assert answer.status_code == 200 and answer.json()["status"] == "stored", answer.text
    return session.session_id


def test_a_from_store_run_trains_on_production_sessions_by_their_feedback_and_never_on_a_deleted_users(
    deployed_stack, tmp_path
) -> None:  # fmt: skip
    rule = {"thumbs_up": 1.0, "resolved": 1.0, "thumbs_down": -1.0}
    expected: dict[str, float] = {}
    for user in ("u0", "u1", "u2"):
        expected[
            production_session(deployed_stack, user, ["prod"], {"thumbs_up": 1.0, "resolved": 1.0})
        ] = 2.0
        expected[production_session(deployed_stack, user, ["prod"], {"thumbs_down": 1.0})] = -1.0
    gone = [
        production_session(deployed_stack, "gone", ["prod"], {"thumbs_up": 1.0}) for _ in range(2)
    ]
    production_session(deployed_stack, "quiet", ["prod"], {})
    production_session(deployed_stack, "staging", ["staging"], {"thumbs_up": 1.0})
    # The end user asks for deletion before the run starts.
    assert parity.delete_user_data("gone", store_address=deployed_stack.store.address).sessions == 2

    result = parity.train(
        one_reply_agent, val_tasks=[{"id": "v1", "prompt": "Count to three."}], val_samples=2,
        model=deployed_stack.vllm.config.model_path, stack=deployed_stack.addresses, from_store=True, steps=3,
        groups_per_batch=2, rollouts_per_task=3, store_tags="prod", store_idle_minutes=0.0,
        feedback_weights=",".join(f"{name}={weight}" for name, weight in rule.items()), learning_rate=3e-3,
        export=False, output_dir=str(tmp_path / "runs"), progress=False,
    )  # fmt: skip
    # Six sessions make step 1; step 2 finds none left, and the run ends there, completed, and validates after
    # the stop that ended it, at the step its checkpoint holds.
    assert result.state == "completed" and result.steps == 1, result.error
    assert "no usable sessions for step 2" in result.stopped_early
    validated = TrainerClient(deployed_stack.trainer.address).list_run_metrics(trainer_pb.ListRunMetricsRequest(
        run_id=result.run_id, kind=trainer_pb.METRICS_KIND_VALIDATION)).metrics  # fmt: skip
    assert [v.step for v in validated] == [0, 1] and result.val_pass_after
    assert result.store_sessions == {"used": 6, "deleted": 0, "skipped_active": 0, "skipped_filtered_out": 0,
                                     "skipped_too_stale": 0, "skipped_awaiting_feedback": 0, "skipped_no_feedback": 1}  # fmt: skip
    trainer = TrainerClient(deployed_stack.trainer.address)
    batch = trainer.get_step_batch(
        trainer_pb.GetStepBatchRequest(run_id=result.run_id, step=1)
    ).batch
    # Every sample is a chosen session's, with the reward the rule gave its feedback; none is the deleted user's.
    assert {s.session_id: s.reward for s in batch.samples} == expected
    assert not {s.session_id for s in batch.samples} & set(gone)
    assert {s.end_user_id for s in batch.samples} == {"u0", "u1", "u2"}
    found = trainer.list_trained_sessions(
        trainer_pb.ListTrainedSessionsRequest(end_user_id="gone")
    ).steps
    assert not [s for s in found if s.run_id == result.run_id]
    # Adopted sessions are closed for the run, so another run never trains on them again.
    store = StoreClient(deployed_stack.store.address)
    adopted = store.get_session(store_pb.GetSessionRequest(session_id=next(iter(expected)))).session
    assert (
        adopted.state == session_pb2.SESSION_STATE_CLOSED
        and adopted.metadata["parity.run_id"] == result.run_id
    )

    # Nothing usable is left: the next run ends at once, before its first step, and says why (a run that waited
    # instead would hang: pytest-timeout's to stop).
    empty = parity.train(
        model=deployed_stack.vllm.config.model_path, stack=deployed_stack.addresses, from_store=True, steps=1,
        store_tags="prod", store_idle_minutes=0.0, export=False, output_dir=str(tmp_path / "runs"), progress=False,
    )  # fmt: skip
    assert empty.state == "failed" and empty.steps == 0
    assert "no usable sessions for step 1 (skipped: no_feedback: 1)" in empty.error

    # A continuous run waits for new sessions instead, and trains once enough have come.
    with parity.Trainer(
        model=str(deployed_stack.vllm.config.model_path), stack=deployed_stack.addresses, from_store=True, continuous=True,
        store_poll_s=0.5, steps=1, groups_per_batch=1, rollouts_per_task=2, store_tags="prod", store_idle_minutes=0.0,
        export=False, output_dir=str(tmp_path / "runs"), progress=False,
    ) as waiting, concurrent.futures.ThreadPoolExecutor(1) as pool:  # fmt: skip
        step = pool.submit(waiting.step)
        control = TrainerClient(deployed_stack.trainer.address)
        eventually(lambda: control.get_status(trainer_pb.GetStatusRequest()).run.state == run_pb2.RUN_STATE_WAITING_FOR_DATA,
                   what="the continuous run waiting for data")  # fmt: skip
        assert not step.done()
        arrived = {
            production_session(deployed_stack, "u3", ["prod"], {"thumbs_up": value}): value
            for value in (1.0, 0.0)
        }
        assert step.result(timeout=300).values["store_sessions_used"] == 2
        batch = control.get_step_batch(
            trainer_pb.GetStepBatchRequest(run_id=waiting.run_id, step=1)
        ).batch
        assert {s.session_id: s.reward for s in batch.samples} == arrived
        assert waiting.finish().state == "completed"

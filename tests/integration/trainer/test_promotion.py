"""Gated promotion against real services: a trainer whose runs update their own vLLM, and a serving vLLM
behind the users' ingest that only a promotion that passes its gate changes, verified by the probe; a
canary share of users' sessions served from the trainer's vLLM first; one call rolls either back."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

import parity
from parity import StackAddresses
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.assembler.v1 import assembler_service_pb2_grpc as assembler_grpc
from parity.api.ingest.v1 import ingest_service_pb2 as ingest_pb
from parity.api.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.store.v1 import store_service_pb2_grpc as store_grpc
from parity.api.trainer.v1 import promotion_pb2, run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as pb
from parity.api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from parity.promotion import promote_main, promotions_main
from parity.services.inference.vllm_launcher import VllmServer
from parity.services.ingest.upstream.canary import in_canary
from parity.services.trainer.replicas import VllmReplica
from parity.services.trainer.weight_sync import model_probe
from tests.call_factory import make_call
from tests.integration.service_fixtures import ServiceLauncher
from tests.integration.stack_fixtures import start_ingest
from tests.integration.trainer.conftest import serving
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


@dataclass
class Production:
    trainer: pb_grpc.TrainerServiceStub
    trainer_address: str
    store: store_grpc.TokenStoreServiceStub
    assembler: assembler_grpc.AssemblerServiceStub
    users_ingest: ingest_grpc.IngestServiceStub
    users_url: str
    served: VllmReplica
    candidates: VllmReplica
    stack: StackAddresses


@pytest.fixture(scope="module")
def production(
    module_services: ServiceLauncher, trainer_vllm: VllmServer, tiny_model_dir, tmp_path_factory
) -> Iterator[Production]:
    data = tmp_path_factory.mktemp("production")
    with serving(tiny_model_dir, tmp_path_factory) as users_vllm:
        store = module_services.start(
            "store", "--url", f"sqlite:///{data}/store.db", "--shutdown-grace-s", "0.5"
        )
        assembler = module_services.start("assembler", "--store-address", store.address, "--group-idle-s", "0.3",
                                          "--shutdown-grace-s", "0.5")  # fmt: skip
        training_ingest, training_port = start_ingest(
            module_services, store.address, trainer_vllm.base_url, data / "training-spool.db"
        )
        users_ingest, users_port = start_ingest(
            module_services, store.address, users_vllm.base_url, data / "users-spool.db"
        )
        trainer = module_services.start(
            "trainer", "--assembler-address", assembler.address, "--ingest-address", training_ingest.address,
            "--replicas", trainer_vllm.base_url, "--serving-replicas", users_vllm.base_url,
            "--serving-ingest-address", users_ingest.address, "--work-dir", str(data / "trainer"), "--shutdown-grace-s", "1",
        )  # fmt: skip
        yield Production(
            pb_grpc.TrainerServiceStub(grpc.insecure_channel(trainer.address)), trainer.address,
            store_grpc.TokenStoreServiceStub(grpc.insecure_channel(store.address)),
            assembler_grpc.AssemblerServiceStub(grpc.insecure_channel(assembler.address)),
            ingest_grpc.IngestServiceStub(grpc.insecure_channel(users_ingest.address)),
            f"http://127.0.0.1:{users_port}/v1", VllmReplica(users_vllm.base_url), VllmReplica(trainer_vllm.base_url),
            StackAddresses(f"http://127.0.0.1:{training_port}", assembler.address, trainer.address),
        )  # fmt: skip


def train(stack: Production, model_dir, steps: int) -> run_pb2.Run:
    """A run of `steps` updates on stored sessions, with a checkpoint after each."""
    config = run_pb2.RunConfig(
        model_path=str(model_dir), total_steps=steps, groups_per_batch=1, learning_rate=1e-2, checkpoint_interval=1,
        backend=run_pb2.TRAINING_BACKEND_CPU,
    )  # fmt: skip
    run_id = stack.trainer.StartRun(pb.StartRunRequest(config=config)).run.run_id
    for step in range(steps):
        for index, reward in enumerate([1.0, 0.0]):
            session = f"{run_id}-{step}-{index}"
            call = make_call(f"{session}-c0", session, [1, 2, 3, 4], [[10 + index, 20 + step, 30]])
            stack.store.WriteCalls(store_pb.WriteCallsRequest(calls=[call]))
            stack.assembler.CloseSession(assembler_pb.CloseSessionRequest(
                session_id=session, group_id=f"{run_id}-{step}", group_size=2, reward=reward,
            ))  # fmt: skip
    return eventually(
        lambda: (r := stack.trainer.GetRun(pb.GetRunRequest(run_id=run_id)).run).state == run_pb2.RUN_STATE_COMPLETED and r,
        timeout_s=180, what="the run to complete",
    )  # fmt: skip


def validate(stack: Production, run_id: str, step: int, pass_at_1: float) -> None:
    stack.trainer.WriteValidationMetrics(
        pb.WriteValidationMetricsRequest(run_id=run_id, step=step, values={"pass@1": pass_at_1})
    )


TASKS = [{"id": "t1", "prompt": "Count to three."}, {"id": "t2", "prompt": "Name a colour."}]


async def one_reply_agent(task: dict[str, Any]) -> float:
    client = parity.get_async_chat_client()
    reply = await client.chat.completions.create(
        model=task["model"], messages=[{"role": "user", "content": task["prompt"]}], max_tokens=task["max_tokens"],
    )  # fmt: skip
    return float(len(reply.choices[0].message.content or "") % 2)


def chat(stack: Production, session: str) -> None:
    """One end user's call through the users' ingest."""
    reply = httpx.post(f"{stack.users_url}/chat/completions", headers={"X-Parity-Session": session},
                       json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}, timeout=60)  # fmt: skip
    assert reply.status_code == 200, reply.text


def stored_calls(stack: Production, session: str) -> list[Any]:
    return eventually(lambda: list(stack.store.ListCalls(store_pb.ListCallsRequest(session_id=session)).calls),
                      timeout_s=30, what=f"the calls of {session} to be stored")  # fmt: skip


def users_version(stack: Production) -> int:
    return stack.users_ingest.GetStats(ingest_pb.GetStatsRequest()).policy_version


def test_only_a_candidate_that_passes_the_gate_reaches_users_and_one_call_takes_it_back(
    production, tiny_model_dir, tmp_path, capsys
) -> None:
    stack = production
    probe = model_probe(tiny_model_dir)
    original = np.array(stack.served.prompt_logprobs(probe))
    with pytest.raises(grpc.RpcError) as nothing_to_undo:
        stack.trainer.RollbackPolicy(pb.RollbackPolicyRequest())
    assert nothing_to_undo.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no promotion stands" in (nothing_to_undo.value.details() or "")
    with pytest.raises(grpc.RpcError) as unknown:
        stack.trainer.PromotePolicy(pb.PromotePolicyRequest(run_id="run-20260101-000000-abcdef"))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND

    run = train(stack, tiny_model_dir, steps=2)
    trained = np.array(stack.candidates.prompt_logprobs(probe))
    assert np.max(np.abs(trained - original)) > 1e-2  # the run moved its own replicas' weights...
    assert np.array_equal(
        np.array(stack.served.prompt_logprobs(probe)), original
    )  # ...and not the users'
    for request, code, field in (
        (
            pb.PromotePolicyRequest(run_id=run.run_id, margin=-0.1),
            grpc.StatusCode.INVALID_ARGUMENT,
            "margin",
        ),
        (
            pb.PromotePolicyRequest(run_id=run.run_id, checkpoint_id="run-other/step-000001"),
            grpc.StatusCode.NOT_FOUND,
            "run-other",
        ),
    ):
        with pytest.raises(grpc.RpcError) as bad:
            stack.trainer.PromotePolicy(request)
        assert bad.value.code() == code and field in (bad.value.details() or "")

    # Worse than what serves by more than the margin: kept, not served, the reason recorded.
    validate(stack, run.run_id, 0, 0.40)
    validate(stack, run.run_id, 2, 0.30)
    refused = stack.trainer.PromotePolicy(
        pb.PromotePolicyRequest(run_id=run.run_id, margin=0.05)
    ).promotion
    assert (
        refused.outcome == promotion_pb2.PROMOTION_OUTCOME_REFUSED and refused.policy_version == 0
    )
    assert refused.checkpoint_id == f"{run.run_id}/step-000002"
    assert (
        refused.reason
        == "pass@1 0.3 at step 2 is below the serving model's 0.4 by 0.1, more than the margin 0.05"
    )
    assert (
        np.array_equal(np.array(stack.served.prompt_logprobs(probe)), original)
        and users_version(stack) == 0
    )
    assert promote_main(["--address", stack.trainer_address, run.run_id, "--margin", "0.05"]) == 3
    assert "refused checkpoint" in capsys.readouterr().out

    # As good as what serves within the margin: loaded into the serving replicas, verified, versioned.
    validate(stack, run.run_id, 2, 0.38)
    promoted = stack.trainer.PromotePolicy(
        pb.PromotePolicyRequest(run_id=run.run_id, margin=0.05)
    ).promotion
    assert promoted.outcome == promotion_pb2.PROMOTION_OUTCOME_PROMOTED, promoted.reason
    assert (promoted.baseline, promoted.candidate, promoted.metric) == (0.40, 0.38, "pass@1")
    # The version the run gave these weights: a call stamped with it came from them, whichever ingest served it.
    assert promoted.policy_version == run.policy_version == users_version(stack)
    assert promoted.max_logprob_diff < 1e-3
    served = np.array(stack.served.prompt_logprobs(probe))
    assert (
        np.max(np.abs(served - trained)) < 1e-4
    )  # users get exactly what the run's last step made
    chat(stack, "user-after-promotion")
    assert stored_calls(stack, "user-after-promotion")[0].policy_version == promoted.policy_version

    # The step-1 checkpoint's validation measured the run's start model, which no longer serves.
    validate(stack, run.run_id, 1, 0.45)
    stale = stack.trainer.PromotePolicy(
        pb.PromotePolicyRequest(run_id=run.run_id, checkpoint_id=f"{run.run_id}/step-000001")
    ).promotion
    assert stale.outcome == promotion_pb2.PROMOTION_OUTCOME_REFUSED
    assert f"do not serve the model run {run.run_id} started from" in stale.reason
    assert np.max(np.abs(np.array(stack.served.prompt_logprobs(probe)) - trained)) < 1e-4

    # One call puts back what served before, verified, under a new version.
    rolled = stack.trainer.RollbackPolicy(pb.RollbackPolicyRequest()).promotion
    assert rolled.outcome == promotion_pb2.PROMOTION_OUTCOME_ROLLED_BACK
    assert rolled.policy_version == promoted.policy_version + 1 == users_version(stack)
    assert f"took back {promoted.promotion_id}" in rolled.reason
    assert np.max(np.abs(np.array(stack.served.prompt_logprobs(probe)) - original)) < 1e-4
    with pytest.raises(grpc.RpcError) as again:
        stack.trainer.RollbackPolicy(pb.RollbackPolicyRequest())
    assert again.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    listed = stack.trainer.ListPromotions(pb.ListPromotionsRequest(page_size=2))
    assert [p.promotion_id for p in listed.promotions] == [
        rolled.promotion_id,
        stale.promotion_id,
    ] and listed.next_page_token
    assert promotions_main(["--address", stack.trainer_address]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and "rolled back" in lines[0] and "promoted checkpoint" in lines[2]
    assert "refused checkpoint" in lines[3] and "refused checkpoint" in lines[4]

    # A canary: the candidate serves a share of sessions from the trainer's replicas, at its own version; the
    # serving replicas are untouched and no run may change the canary's replicas meanwhile.
    canary = stack.trainer.PromotePolicy(
        pb.PromotePolicyRequest(run_id=run.run_id, margin=0.05, canary_share=0.5)
    ).promotion
    assert (
        canary.outcome == promotion_pb2.PROMOTION_OUTCOME_CANARY and canary.canary_share == 0.5
    ), canary.reason
    assert canary.policy_version == rolled.policy_version + 1
    stats = stack.users_ingest.GetStats(ingest_pb.GetStatsRequest())
    assert (stats.canary_share, stats.canary_policy_version, stats.policy_version) == (
        0.5,
        canary.policy_version,
        rolled.policy_version,
    )
    assert list(stats.canary_upstreams) == [stack.candidates.base_url]
    assert np.max(np.abs(np.array(stack.served.prompt_logprobs(probe)) - original)) < 1e-4
    assert np.max(np.abs(np.array(stack.candidates.prompt_logprobs(probe)) - trained)) < 1e-4
    with pytest.raises(grpc.RpcError) as blocked:
        stack.trainer.StartRun(
            pb.StartRunRequest(
                config=run_pb2.RunConfig(model_path=str(tiny_model_dir), total_steps=1)
            )
        )
    assert blocked.value.code() == grpc.StatusCode.FAILED_PRECONDITION and canary.promotion_id in (
        blocked.value.details() or ""
    )
    sessions = [f"canary-user-{index}" for index in range(8)]
    for session in sessions:
        chat(stack, session)
    versions = {session: stored_calls(stack, session)[0].policy_version for session in sessions}
    expected = {
        s: canary.policy_version if in_canary(s, 0.5) else rolled.policy_version for s in sessions
    }
    assert (
        versions == expected and len(set(versions.values())) == 2
    )  # every call stamped by the side that served it

    # Promoting it without a share serves everyone and ends the canary; a rollback ends a canary and nothing else.
    full = stack.trainer.PromotePolicy(
        pb.PromotePolicyRequest(run_id=run.run_id, margin=0.05)
    ).promotion
    assert (
        full.outcome == promotion_pb2.PROMOTION_OUTCOME_PROMOTED
        and full.policy_version == canary.policy_version
    )
    assert stack.users_ingest.GetStats(ingest_pb.GetStatsRequest()).canary_share == 0
    assert np.max(np.abs(np.array(stack.served.prompt_logprobs(probe)) - trained)) < 1e-4
    stack.trainer.RollbackPolicy(pb.RollbackPolicyRequest())
    stack.trainer.PromotePolicy(
        pb.PromotePolicyRequest(run_id=run.run_id, margin=0.05, canary_share=0.25)
    )
    ended = stack.trainer.RollbackPolicy(pb.RollbackPolicyRequest()).promotion
    assert (
        ended.outcome == promotion_pb2.PROMOTION_OUTCOME_ROLLED_BACK
        and "ended the canary" in ended.reason
    )
    stats = stack.users_ingest.GetStats(ingest_pb.GetStatsRequest())
    assert stats.canary_share == 0 and stats.policy_version == ended.policy_version
    assert np.max(np.abs(np.array(stack.served.prompt_logprobs(probe)) - original)) < 1e-4

    # `parity train --promote`: the run validates through its own replicas, then asks the gate. Its versions
    # start past every version users were served.
    result = parity.train(
        one_reply_agent, TASKS, val_tasks=TASKS, model=str(tiny_model_dir), stack=stack.stack, steps=1, groups_per_batch=1,
        rollouts_per_task=2, max_tokens=4, val_samples=1, promote=True, promote_metric="reward", promote_margin=1.0,
        output_dir=str(tmp_path / "runs"), progress=False,
    )  # fmt: skip
    assert result.state == "completed", result.error
    assert (
        result.promotion.startswith("promotion-") and "promoted checkpoint" in result.promotion
    ), result.promotion
    run = stack.trainer.GetRun(pb.GetRunRequest(run_id=result.run_id)).run
    assert run.policy_version > ended.policy_version and users_version(stack) == run.policy_version
    assert (
        np.max(
            np.abs(
                np.array(stack.served.prompt_logprobs(probe))
                - np.array(stack.candidates.prompt_logprobs(probe))
            )
        )
        < 1e-4
    )

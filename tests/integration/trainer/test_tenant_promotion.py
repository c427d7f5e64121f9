"""Tenants on one serving deployment: each LoRA run's adapter promoted under its tenant's model name reaches only
the users whose agents ask for that name, and each name is rolled back on its own.

Real services throughout: a trainer whose LoRA runs update their own vLLM, and a serving vLLM (adapters enabled)
behind the users' ingest, whose model alias sends a tenant's name to the base model until its first promotion.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import httpx
import numpy as np
import pytest

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.assembler.v1 import assembler_service_pb2_grpc as assembler_grpc
from parity.api.common.v1 import llm_call_pb2
from parity.api.ingest.v1 import ingest_service_pb2 as ingest_pb
from parity.api.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.store.v1 import store_service_pb2_grpc as store_grpc
from parity.api.trainer.v1 import promotion_pb2, run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as pb
from parity.api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from parity.promotion import rollback_main
from parity.services.inference.tiny_model import TinyModelSpec, generate_tiny_model
from parity.services.inference.vllm_launcher import VllmServer
from parity.services.trainer.replicas import VllmReplica
from parity.services.trainer.weight_sync import model_probe
from tests.call_factory import make_call
from tests.integration.service_fixtures import ServiceLauncher
from tests.integration.stack_fixtures import start_ingest
from tests.integration.trainer.conftest import serving
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]

RANK = 8
ACME, GLOBEX = "tiny-acme", "tiny-globex"
# A run's single adapter on the trainer's own replicas (lora.adapter_name).
TRAINER_ADAPTER = "tiny-lora"


@dataclass
class Tenants:
    trainer: pb_grpc.TrainerServiceStub
    trainer_address: str
    store: store_grpc.TokenStoreServiceStub
    assembler: assembler_grpc.AssemblerServiceStub
    users_ingest: ingest_grpc.IngestServiceStub
    users_url: str
    served: VllmReplica
    candidates: VllmReplica


@pytest.fixture(scope="module")
def tenant_model(tmp_path_factory):
    """The tiny model with room for an adapter to move its logprobs visibly (as test_lora's)."""
    return generate_tiny_model(
        tmp_path_factory.mktemp("tenant_model"), TinyModelSpec(output_gain=8.0)
    )


@pytest.fixture(scope="module")
def trainer_vllm(tenant_model, tmp_path_factory) -> Iterator[VllmServer]:
    with serving(tenant_model, tmp_path_factory, lora_rank=RANK) as server:
        yield server


@pytest.fixture(scope="module")
def tenants(
    module_services: ServiceLauncher, trainer_vllm: VllmServer, tenant_model, tmp_path_factory
) -> Iterator[Tenants]:
    data = tmp_path_factory.mktemp("tenants")
    with serving(tenant_model, tmp_path_factory, lora_rank=RANK, max_loras=2) as users_vllm:
        store = module_services.start(
            "store", "--url", f"sqlite:///{data}/store.db", "--shutdown-grace-s", "0.5"
        )
        assembler = module_services.start("assembler", "--store-address", store.address, "--group-idle-s", "0.3",
                                          "--shutdown-grace-s", "0.5")  # fmt: skip
        training_ingest, _ = start_ingest(
            module_services, store.address, trainer_vllm.base_url, data / "training-spool.db"
        )
        users_ingest, users_port = start_ingest(
            module_services, store.address, users_vllm.base_url, data / "users-spool.db", "--model-alias", "tiny-*=tiny"
        )  # fmt: skip
        trainer = module_services.start(
            "trainer", "--assembler-address", assembler.address, "--ingest-address", training_ingest.address,
            "--replicas", trainer_vllm.base_url, "--serving-replicas", users_vllm.base_url,
            "--serving-ingest-address", users_ingest.address, "--work-dir", str(data / "trainer"), "--shutdown-grace-s", "1",
        )  # fmt: skip
        yield Tenants(
            pb_grpc.TrainerServiceStub(grpc.insecure_channel(trainer.address)), trainer.address,
            store_grpc.TokenStoreServiceStub(grpc.insecure_channel(store.address)),
            assembler_grpc.AssemblerServiceStub(grpc.insecure_channel(assembler.address)),
            ingest_grpc.IngestServiceStub(grpc.insecure_channel(users_ingest.address)),
            f"http://127.0.0.1:{users_port}/v1", VllmReplica(users_vllm.base_url), VllmReplica(trainer_vllm.base_url),
        )  # fmt: skip


def train_lora(stack: Tenants, model_dir, name: str, steps: int = 2) -> run_pb2.Run:
    """A LoRA run of `steps` updates on stored sessions, validated at step 0 and at its end so the gate passes."""
    config = run_pb2.RunConfig(
        model_path=str(model_dir), total_steps=steps, groups_per_batch=1, learning_rate=1e-2, checkpoint_interval=1,
        backend=run_pb2.TRAINING_BACKEND_CPU, lora=run_pb2.LoraConfig(rank=RANK),
    )  # fmt: skip
    run_id = stack.trainer.StartRun(pb.StartRunRequest(config=config)).run.run_id
    for step in range(steps):
        for index, reward in enumerate([1.0, 0.0]):
            session = f"{name}-{step}-{index}"
            call = make_call(f"{session}-c0", session, [1, 2, 3, 4], [[10 + index, 20 + step, 30]])
            stack.store.WriteCalls(store_pb.WriteCallsRequest(calls=[call]))
            stack.assembler.CloseSession(assembler_pb.CloseSessionRequest(
                session_id=session, group_id=f"{name}-{step}", group_size=2, reward=reward,
            ))  # fmt: skip
    run = eventually(
        lambda: (r := stack.trainer.GetRun(pb.GetRunRequest(run_id=run_id)).run).state == run_pb2.RUN_STATE_COMPLETED and r,
        timeout_s=180, what=f"{name}'s run to complete",
    )  # fmt: skip
    for step, value in ((0, 0.4), (steps, 0.5)):
        stack.trainer.WriteValidationMetrics(
            pb.WriteValidationMetricsRequest(run_id=run_id, step=step, values={"pass@1": value})
        )
    return run


def user_call(stack: Tenants, session: str, model: str) -> llm_call_pb2.LlmCall:
    """One end user's call through the users' ingest, asking for `model`, as the store recorded it."""
    reply = httpx.post(f"{stack.users_url}/chat/completions", headers={"X-Parity-Session": session},
                       json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}, timeout=60)  # fmt: skip
    assert reply.status_code == 200, reply.text
    return eventually(
        lambda: next(iter(stack.store.ListCalls(store_pb.ListCallsRequest(session_id=session)).calls), None),
        timeout_s=30, what=f"the call of {session} to be stored",
    )  # fmt: skip


def largest_gap(a: list[float], b: list[float]) -> float:
    return float(np.max(np.abs(np.array(a) - np.array(b))))


def test_each_tenants_adapter_reaches_only_its_users_and_rolls_back_alone(
    tenants, tenant_model, capsys
) -> None:
    stack = tenants
    probe = model_probe(tenant_model)
    base = stack.served.prompt_logprobs(probe)
    before = user_call(stack, "acme-before", ACME)
    assert (before.policy_version, before.lora_adapter) == (0, ""), (
        "the alias sends a tenant to the base model"
    )

    acme_run = train_lora(stack, tenant_model, "acme")
    acme = stack.candidates.prompt_logprobs(probe, model=TRAINER_ADAPTER)
    assert largest_gap(acme, base) > 1e-2, "the run moved its adapter"
    for request, field in (
        (
            pb.PromotePolicyRequest(run_id=acme_run.run_id, served_model="tiny"),
            "the serving replicas' own model",
        ),
        (
            pb.PromotePolicyRequest(run_id=acme_run.run_id, served_model=ACME, canary_share=0.5),
            "canary_share",
        ),
    ):
        with pytest.raises(grpc.RpcError) as bad:
            stack.trainer.PromotePolicy(request)
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in (
            bad.value.details() or ""
        )

    promoted = stack.trainer.PromotePolicy(
        pb.PromotePolicyRequest(run_id=acme_run.run_id, served_model=ACME)
    ).promotion
    assert promoted.outcome == promotion_pb2.PROMOTION_OUTCOME_PROMOTED, promoted.reason
    assert promoted.served_model == ACME and promoted.policy_version == acme_run.policy_version
    assert largest_gap(stack.served.prompt_logprobs(probe, model=ACME), acme) < 1e-4
    assert largest_gap(stack.served.prompt_logprobs(probe), base) < 1e-5, (
        "every other user keeps the base model"
    )
    stats = stack.users_ingest.GetStats(ingest_pb.GetStatsRequest())
    assert stats.policy_version == 0 and [(r.policy_model, r.lora_adapter, r.policy_version) for r in stats.routes] == [
        (ACME, ACME, promoted.policy_version)
    ]  # fmt: skip
    acme_call = user_call(stack, "acme-after", ACME)
    assert (acme_call.policy_version, acme_call.lora_adapter) == (promoted.policy_version, ACME)
    for session, model in (("globex-before", GLOBEX), ("everyone-else", "tiny")):
        call = user_call(stack, session, model)
        assert (call.policy_version, call.lora_adapter) == (0, ""), model

    globex_run = train_lora(stack, tenant_model, "globex")
    globex = stack.candidates.prompt_logprobs(probe, model=TRAINER_ADAPTER)
    second = stack.trainer.PromotePolicy(
        pb.PromotePolicyRequest(run_id=globex_run.run_id, served_model=GLOBEX)
    ).promotion
    assert second.outcome == promotion_pb2.PROMOTION_OUTCOME_PROMOTED, second.reason
    assert largest_gap(stack.served.prompt_logprobs(probe, model=GLOBEX), globex) < 1e-4
    assert largest_gap(stack.served.prompt_logprobs(probe, model=ACME), acme) < 1e-4, (
        "acme's adapter stays"
    )
    assert user_call(stack, "globex-after", GLOBEX).policy_version == second.policy_version

    # Acme's promotion taken back: its users get the base model again, at the users' own version; Globex keeps its.
    assert rollback_main(["--address", stack.trainer_address, "--served-model", ACME]) == 0
    assert f"users of {ACME} get policy version" in capsys.readouterr().out
    withdrawn = user_call(stack, "acme-withdrawn", ACME)
    assert (withdrawn.policy_version, withdrawn.lora_adapter) == (0, "")
    assert user_call(stack, "globex-still", GLOBEX).lora_adapter == GLOBEX
    with pytest.raises(grpc.RpcError) as nothing:
        stack.trainer.RollbackPolicy(pb.RollbackPolicyRequest(served_model=ACME))
    assert nothing.value.code() == grpc.StatusCode.FAILED_PRECONDITION and ACME in (
        nothing.value.details() or ""
    )
    with pytest.raises(grpc.RpcError) as everyone:
        stack.trainer.RollbackPolicy(pb.RollbackPolicyRequest())
    assert "no promotion stands" in (everyone.value.details() or ""), (
        "a tenant's promotion is not everyone's"
    )
    listed = stack.trainer.ListPromotions(pb.ListPromotionsRequest()).promotions
    assert [(p.outcome, p.served_model) for p in listed] == [
        (promotion_pb2.PROMOTION_OUTCOME_ROLLED_BACK, ACME), (promotion_pb2.PROMOTION_OUTCOME_PROMOTED, GLOBEX),
        (promotion_pb2.PROMOTION_OUTCOME_PROMOTED, ACME),
    ]  # fmt: skip

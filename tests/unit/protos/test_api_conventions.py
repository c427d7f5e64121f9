"""API rules that buf's STANDARD lint does not check, read from the compiled descriptors."""

import os
import shutil
import subprocess

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor, ServiceDescriptor

from parity.api.assembler.v1 import assembler_service_pb2
from parity.api.common.v1 import llm_call_pb2, sample_pb2
from parity.api.ingest.v1 import ingest_service_pb2
from parity.api.store.v1 import store_service_pb2
from parity.api.trainer.v1 import trainer_service_pb2
from tests.conftest import REPO_ROOT

SERVICES: list[ServiceDescriptor] = [
    store_service_pb2.DESCRIPTOR.services_by_name["TokenStoreService"],
    ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"],
    assembler_service_pb2.DESCRIPTOR.services_by_name["AssemblerService"],
    trainer_service_pb2.DESCRIPTOR.services_by_name["TrainerService"],
]
METHODS = [(s.name, m) for s in SERVICES for m in s.methods]
# AIP's read methods: Get, BatchGet, List, and the live tails (Watch).
READ_PREFIXES = ("Get", "BatchGet", "List", "Watch")


def _applicable(
    rule: str, methods: list[tuple[str, MethodDescriptor]]
) -> list[tuple[str, MethodDescriptor]]:
    """The methods a rule applies to, computed at collection so every test item checks one. pytest
    reports a test parametrized over nothing as skipped, so a rule left with nothing fails collection here."""
    assert methods, f"no RPC for the rule {rule!r} to check: has a rename emptied it?"
    return methods


def _ids(methods: list[tuple[str, MethodDescriptor]]) -> list[str]:
    return [f"{service}.{method.name}" for service, method in methods]


READS = _applicable(
    "reads are marked", [(s, m) for s, m in METHODS if m.name.startswith(READ_PREFIXES)]
)
LISTS = _applicable(
    "List RPCs are paginated", [(s, m) for s, m in METHODS if m.name.startswith("List")]
)


def _idempotency(method: MethodDescriptor) -> int:
    options = descriptor_pb2.MethodOptions()
    options.ParseFromString(method.GetOptions().SerializeToString())
    return options.idempotency_level


@pytest.mark.parametrize(("service", "method"), READS, ids=_ids(READS))
def test_reads_are_marked_no_side_effects(service: str, method: MethodDescriptor) -> None:
    assert _idempotency(method) == descriptor_pb2.MethodOptions.NO_SIDE_EFFECTS


@pytest.mark.parametrize(("service", "method"), LISTS, ids=_ids(LISTS))
def test_list_rpcs_are_paginated(service: str, method: MethodDescriptor) -> None:
    request_fields = method.input_type.fields_by_name
    assert request_fields["page_size"].type == FieldDescriptor.TYPE_INT32
    assert request_fields["page_token"].type == FieldDescriptor.TYPE_STRING
    assert method.output_type.fields_by_name["next_page_token"].type == FieldDescriptor.TYPE_STRING


@pytest.mark.parametrize(
    ("service", "method"), _applicable("every RPC", METHODS), ids=_ids(METHODS)
)
def test_each_rpc_has_its_own_request_and_response(service: str, method: MethodDescriptor) -> None:
    assert method.input_type.name == f"{method.name}Request"
    assert method.output_type.name == f"{method.name}Response"


def test_the_required_rpcs_exist() -> None:
    required = {
        "TokenStoreService": {
            "WriteCalls",
            "GetCall",
            "ListCalls",
            "WatchCalls",
            "WriteRewards",
            "ListSessions",
            "CloseSession",
            "DeleteSessions",
        },
        "IngestService": {
            "GetStats",
            "ListReplicas",
            "PauseTraffic",
            "ResumeTraffic",
            "SetPolicyVersion",
        },
        "AssemblerService": {
            "ReportReward",
            "CloseSession",
            "GetTrajectory",
            "ListTrajectories",
            "StreamBatches",
        },
        "TrainerService": {"GetStatus", "StreamMetrics", "SyncWeights", "StartRun", "StopRun"},
    }
    for service in SERVICES:
        assert required[service.name] <= set(service.methods_by_name)
    watch = SERVICES[0].methods_by_name["WatchCalls"]
    assert watch.server_streaming and not watch.client_streaming
    batches = SERVICES[2].methods_by_name["StreamBatches"]
    assert batches.server_streaming and batches.client_streaming


def test_token_arrays_travel_as_packed_bytes() -> None:
    packed = [
        llm_call_pb2.LlmCall.DESCRIPTOR.fields_by_name["prompt_token_ids"],
        llm_call_pb2.Choice.DESCRIPTOR.fields_by_name["token_ids"],
        llm_call_pb2.Choice.DESCRIPTOR.fields_by_name["logprobs"],
        *(
            sample_pb2.Sample.DESCRIPTOR.fields_by_name[name]
            for name in ("token_ids", "loss_mask", "rollout_logprobs", "token_rewards")
        ),
    ]
    assert all(field.type == FieldDescriptor.TYPE_BYTES for field in packed)


def test_buf_lint_passes() -> None:
    buf = os.environ.get("PARITY_BUF") or shutil.which(
        "buf", path=str(REPO_ROOT / ".tools" / "node_modules" / ".bin")
    )
    assert buf, (
        "buf not found: run `make env` (installs @bufbuild/buf into .tools/) or set PARITY_BUF"
    )
    result = subprocess.run([buf, "lint", "protos"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"buf lint failed:\n{result.stdout}{result.stderr}"

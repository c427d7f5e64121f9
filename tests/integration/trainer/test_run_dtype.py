"""A run against a real float32 vLLM on a trainer that would resolve `auto` to bfloat16 (a CPU with bf16 units, or
CUDA): `auto` trains in float32, what the replica serves, and a run that names bfloat16 ends before its first step
naming both dtypes."""

from __future__ import annotations

import grpc
import pytest

from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as pb
from parity.api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from parity.clients import TrainerClient
from parity.services.trainer.compute_defaults import CPU_BF16_ENV
from parity.services.trainer.replicas import VllmReplica
from parity.training.run_control import RunControl, RunEnded
from tests.conftest import free_port

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(300)]


def test_an_auto_run_trains_in_the_served_dtype_and_a_named_other_is_refused(
    module_services, trainer_vllm, tmp_path
) -> None:
    assert VllmReplica(trainer_vllm.base_url).served_dtype() == "float32"
    trainer = module_services.start(
        "trainer", "--assembler-address", f"127.0.0.1:{free_port()}", "--replicas", trainer_vllm.base_url,
        "--work-dir", str(tmp_path), environment={CPU_BF16_ENV: "1"},
    )  # fmt: skip
    stub = pb_grpc.TrainerServiceStub(grpc.insecure_channel(trainer.address))

    def start(dtype: run_pb2.TrainingDtype) -> RunControl:
        config = run_pb2.RunConfig(
            model_path=str(trainer_vllm.config.model_path), total_steps=2, groups_per_batch=1,
            backend=run_pb2.TRAINING_BACKEND_CPU, dtype=dtype,
        )  # fmt: skip
        run = stub.StartRun(pb.StartRunRequest(config=config)).run
        return RunControl(TrainerClient(trainer.address), run.run_id, stack=None)

    named = start(run_pb2.TRAINING_DTYPE_BFLOAT16)
    with pytest.raises(RunEnded, match="dtype is bfloat16 but replica .* serves float32") as ended:
        named.wait_until_started()
    assert "--vllm-dtype bfloat16" in str(ended.value) and "resumable" not in str(ended.value)

    start(run_pb2.TRAINING_DTYPE_UNSPECIFIED).wait_until_started()
    run = stub.GetStatus(pb.GetStatusRequest()).run
    assert run.state == run_pb2.RUN_STATE_WAITING_FOR_DATA, run.error_message
    assert run.config.dtype == run_pb2.TRAINING_DTYPE_FLOAT32
    stub.StopRun(pb.StopRunRequest())

"""A trainer that restarts resumes every run it was training, each from its latest checkpoint: after a shutdown
and after being killed. Two LoRA runs train at once on one base (real services, a real vLLM serving adapters),
the trainer goes away mid-run, and both go on to their last step on the restarted one."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.assembler.v1 import assembler_service_pb2_grpc as assembler_grpc
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.store.v1 import store_service_pb2_grpc as store_grpc
from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as pb
from parity.api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from parity.clients import TrainerClient
from parity.core.settings_fields import SettingsError
from parity.services.inference.vllm_launcher import VllmServer
from parity.training.run_control import RunControl
from tests.call_factory import make_call
from tests.conftest import free_port
from tests.integration.service_fixtures import RunningService, ServiceLauncher
from tests.integration.trainer.conftest import serving
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]

RANK = 8
STEPS = 3


@pytest.fixture(scope="module")
def trainer_vllm(tiny_model_dir, tmp_path_factory) -> Iterator[VllmServer]:
    with serving(tiny_model_dir, tmp_path_factory, lora_rank=RANK, max_loras=2) as server:
        yield server


@dataclass
class Stack:
    launcher: ServiceLauncher
    store: store_grpc.TokenStoreServiceStub
    assembler: assembler_grpc.AssemblerServiceStub
    trainer_args: list[str]
    trainer_port: int

    def start_trainer(self) -> RunningService:
        return self.launcher.start("trainer", *self.trainer_args, port=self.trainer_port)

    def trainer(self) -> pb_grpc.TrainerServiceStub:
        return pb_grpc.TrainerServiceStub(grpc.insecure_channel(f"127.0.0.1:{self.trainer_port}"))

    def feed(self, run_id: str, step: int) -> None:
        """One group of two rewarded sessions, marked as the run's."""
        for index, reward in enumerate([1.0, 0.0]):
            session = f"{run_id}-{step}-{index}"
            call = make_call(f"{session}-c0", session, [1, 2, 3, 4], [[10 + index, 20 + step, 30]])
            self.store.WriteCalls(store_pb.WriteCallsRequest(calls=[call]))
            self.assembler.CloseSession(assembler_pb.CloseSessionRequest(
                session_id=session, group_id=f"{run_id}-{step}", group_size=2, reward=reward, run_id=run_id,
            ))  # fmt: skip

    def run(self, run_id: str) -> run_pb2.Run:
        return self.trainer().GetRun(pb.GetRunRequest(run_id=run_id)).run

    def wait_for(self, run_id: str, state: int, step: int) -> run_pb2.Run:
        run = eventually(
            lambda: (r := self.run(run_id)).state == state and r.step == step and r,
            timeout_s=180, what=lambda: f"run {run_id} {run_pb2.RunState.Name(state)} at step {step}: {self.run(run_id)}",
        )  # fmt: skip
        assert isinstance(run, run_pb2.Run)
        return run


@pytest.fixture
def stack(module_services: ServiceLauncher, trainer_vllm: VllmServer, tmp_path: Path) -> Stack:
    store = module_services.start(
        "store", "--url", f"sqlite:///{tmp_path}/store.db", "--shutdown-grace-s", "0.5"
    )
    assembler = module_services.start("assembler", "--store-address", store.address, "--group-idle-s", "0.3",
                                      "--shutdown-grace-s", "0.5")  # fmt: skip
    return Stack(
        module_services, store_grpc.TokenStoreServiceStub(grpc.insecure_channel(store.address)),
        assembler_grpc.AssemblerServiceStub(grpc.insecure_channel(assembler.address)),
        ["--assembler-address", assembler.address, "--replicas", trainer_vllm.base_url, "--work-dir", str(tmp_path / "trainer"),
         "--max-concurrent-runs", "2", "--shutdown-grace-s", "5"],
        free_port(),
    )  # fmt: skip


def start_lora_run(stack: Stack, model_dir: Path, checkpoint_interval: int = 1) -> str:
    config = run_pb2.RunConfig(
        model_path=str(model_dir), total_steps=STEPS, groups_per_batch=1, learning_rate=1e-2,
        checkpoint_interval=checkpoint_interval, backend=run_pb2.TRAINING_BACKEND_CPU, lora=run_pb2.LoraConfig(rank=RANK),
    )  # fmt: skip
    return stack.trainer().StartRun(pb.StartRunRequest(config=config)).run.run_id


@pytest.mark.parametrize("how", ["shut down", "killed"])
def test_every_run_resumes_on_the_restarted_trainer_from_its_checkpoint(
    stack, tiny_model_dir, how
) -> None:
    trainer = stack.start_trainer()
    runs = [start_lora_run(stack, tiny_model_dir) for _ in range(2)]
    for run_id in runs:
        stack.feed(run_id, 1)
    first = {
        run_id: stack.wait_for(run_id, run_pb2.RUN_STATE_WAITING_FOR_DATA, 1) for run_id in runs
    }

    if how == "killed":
        trainer.process.send_signal(signal.SIGKILL)
        trainer.process.wait()
    else:
        assert trainer.terminate() == 0
    stack.start_trainer()
    # Resumed before the restarted trainer answers, each at its checkpoint's step and past its policy version.
    for run_id in runs:
        resumed = stack.run(run_id)
        assert resumed.state in (run_pb2.RUN_STATE_STARTING, run_pb2.RUN_STATE_WAITING_FOR_DATA), (
            resumed
        )
        assert resumed.step == 1 and resumed.policy_version >= first[run_id].policy_version
        assert resumed.served_model == first[run_id].served_model
    # `parity train --resume` takes up a run its trainer resumed, unless it asks for another step budget.
    control = RunControl(TrainerClient(f"127.0.0.1:{stack.trainer_port}"), runs[0], None)
    request = pb.StartRunRequest(
        config=run_pb2.RunConfig(total_steps=STEPS), resume_checkpoint_id=f"{runs[0]}/step-000001"
    )
    assert control.start(request).run_id == runs[0]
    request.config.total_steps = STEPS + 2
    with pytest.raises(SettingsError, match="was resumed by its trainer"):
        control.start(request)
    for run_id in runs:
        stack.feed(run_id, 2)
        stack.feed(run_id, 3)
    for run_id in runs:
        done = stack.wait_for(run_id, run_pb2.RUN_STATE_COMPLETED, STEPS)
        metrics = stack.trainer().ListRunMetrics(pb.ListRunMetricsRequest(run_id=run_id)).metrics
        assert [m.step for m in metrics] == [1, 2, 3] and done.error_message == ""


def test_a_run_without_a_checkpoint_is_marked_failed_with_the_reason_on_restart(
    stack, tiny_model_dir
) -> None:
    trainer = stack.start_trainer()
    run_id = start_lora_run(stack, tiny_model_dir, checkpoint_interval=0)
    stack.wait_for(run_id, run_pb2.RUN_STATE_WAITING_FOR_DATA, 0)
    trainer.process.send_signal(signal.SIGKILL)
    trainer.process.wait()
    stack.start_trainer()
    run = stack.run(run_id)
    assert run.state == run_pb2.RUN_STATE_FAILED
    assert "could not resume the run" in run.error_message and "no checkpoint" in run.error_message

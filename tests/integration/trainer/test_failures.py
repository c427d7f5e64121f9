"""The trainer against a missing assembler and a broken replica, with real services and the tiny model."""

from __future__ import annotations

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
from parity.services.inference.tiny_model import generate_tiny_model
from parity.training.run_control import RunControl, RunEnded
from tests.call_factory import make_call
from tests.conftest import free_port
from tests.waiting import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return generate_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def idle_trainer(module_services, tmp_path_factory):
    """One trainer for the refusal cases: a refused run leaves it as it was, which each case checks last."""
    return module_services.start("trainer", "--assembler-address", f"127.0.0.1:{free_port()}", "--work-dir",
                                 str(tmp_path_factory.mktemp("idle-trainer")))  # fmt: skip


def run_config(model_dir: Path, steps: int = 1) -> run_pb2.RunConfig:
    """Checkpoints go to the trainer's work dir, where a restarted trainer finds them by id."""
    return run_pb2.RunConfig(
        model_path=str(model_dir), total_steps=steps, groups_per_batch=1, learning_rate=1e-3,
        backend=run_pb2.TRAINING_BACKEND_CPU,
    )  # fmt: skip


def test_a_trainer_started_before_the_assembler_waits_retries_and_then_trains(
    start_service, model_dir, tmp_path
) -> None:
    assembler_port = free_port()
    trainer = start_service(
        "trainer", "--assembler-address", f"127.0.0.1:{assembler_port}", "--work-dir", str(tmp_path)
    )
    stub = pb_grpc.TrainerServiceStub(grpc.insecure_channel(trainer.address))
    stub.StartRun(pb.StartRunRequest(config=run_config(model_dir)))
    eventually(lambda: "assembler_unavailable" in trainer.log(),
               timeout_s=60, what="the trainer to report the missing assembler")  # fmt: skip
    assert "waiting for the assembler" in trainer.log()
    assert stub.GetStatus(pb.GetStatusRequest()).run.state == run_pb2.RUN_STATE_WAITING_FOR_DATA

    store = start_service(
        "store", "--url", f"sqlite:///{tmp_path}/store.db", "--shutdown-grace-s", "0.5"
    )
    start_service("assembler", "--store-address", store.address, "--group-idle-s", "0.3", "--shutdown-grace-s", "0.5",
                  port=assembler_port)  # fmt: skip
    store_stub = store_grpc.TokenStoreServiceStub(grpc.insecure_channel(store.address))
    assembler = assembler_grpc.AssemblerServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{assembler_port}")
    )
    for index, reward in enumerate([1.0, 0.0]):
        session = f"rollout-{index}"
        call = make_call(f"{session}-c0", session, [1, 2, 3, 4], [[10 + index, 20, 30]])
        store_stub.WriteCalls(store_pb.WriteCallsRequest(calls=[call]))
        assembler.CloseSession(
            assembler_pb.CloseSessionRequest(
                session_id=session, group_id="task", group_size=2, reward=reward
            )
        )

    run = eventually(lambda: (r := stub.GetStatus(pb.GetStatusRequest()).run).state == run_pb2.RUN_STATE_COMPLETED and r,
                   timeout_s=60, what="the run to complete")  # fmt: skip
    assert run.step == 1 and run.error_message == ""
    assert Path(run.plot_path).read_bytes()[:4] == b"\x89PNG"
    metrics = next(iter(stub.StreamMetrics(pb.StreamMetricsRequest(), timeout=10))).metrics
    assert (
        metrics.step == 1
        and metrics.values["reward_mean"] == 0.5
        and metrics.values["sample_count"] == 2
    )
    checkpoints = stub.ListCheckpoints(pb.ListCheckpointsRequest(run_id=run.run_id)).checkpoints
    assert [c.step for c in checkpoints] == [1]

    # What the step trained on, and the run's history, for readers such as the console.
    (listed,) = stub.ListRuns(pb.ListRunsRequest()).runs
    assert (listed.run_id, listed.state) == (run.run_id, run_pb2.RUN_STATE_COMPLETED)
    batch = stub.GetStepBatch(pb.GetStepBatchRequest(run_id=run.run_id, step=1)).batch
    assert (
        list(batch.group_ids) == ["task"]
        and batch.advantage_estimator == "grpo"
        and batch.stats.sample_count == 2
    )
    won, lost = sorted(batch.samples, key=lambda s: s.session_id)
    assert (won.reward, lost.reward, won.total_return) == (1.0, 0.0, 1.0)
    assert won.advantage > 0 and won.advantage == pytest.approx(-lost.advantage)
    assert (won.token_count, won.loss_token_count, list(won.call_ids)) == (7, 3, ["rollout-0-c0"])
    stub.WriteValidationMetrics(
        pb.WriteValidationMetricsRequest(run_id=run.run_id, step=1, values={"reward": 0.5})
    )
    stub.WriteValidationMetrics(
        pb.WriteValidationMetricsRequest(run_id=run.run_id, step=1, values={"reward": 0.75})
    )
    validations = stub.ListRunMetrics(
        pb.ListRunMetricsRequest(run_id=run.run_id, kind=pb.METRICS_KIND_VALIDATION)
    )
    assert [(m.step, m.values["reward"], m.kind) for m in validations.metrics] == [
        (1, 0.75, pb.METRICS_KIND_VALIDATION)
    ]
    (trained,) = stub.ListRunMetrics(pb.ListRunMetricsRequest(run_id=run.run_id)).metrics
    assert (trained.step, trained.values["reward_mean"]) == (1, 0.5)
    for unknown in (lambda: stub.GetRun(pb.GetRunRequest(run_id="../nope")),
                    lambda: stub.GetStepBatch(pb.GetStepBatchRequest(run_id=run.run_id, step=2))):  # fmt: skip
        with pytest.raises(grpc.RpcError) as missing:
            unknown()
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_replica_failing_sync_stops_the_run_with_a_resumable_checkpoint(
    start_service, model_dir, tmp_path
) -> None:
    dead_replica = f"http://127.0.0.1:{free_port()}"
    common = ("--assembler-address", f"127.0.0.1:{free_port()}", "--work-dir", str(tmp_path))
    trainer = start_service("trainer", *common, "--replicas", dead_replica)
    stub = pb_grpc.TrainerServiceStub(grpc.insecure_channel(trainer.address))
    started = stub.StartRun(pb.StartRunRequest(config=run_config(model_dir, steps=3))).run
    # Starting until every replica serves the run's start weights; a driver waits for that, so a run whose start
    # push fails ends there, with why, before any rollout or validation samples the replicas' old model.
    assert started.state == run_pb2.RUN_STATE_STARTING
    with pytest.raises(RunEnded, match=dead_replica) as ended:
        RunControl(TrainerClient(trainer.address), started.run_id, stack=None).wait_until_started()
    assert ended.value.state == "failed"
    run = stub.GetStatus(pb.GetStatusRequest()).run
    assert dead_replica in run.error_message and "resumable from checkpoint" in run.error_message
    assert "weight sync" in run.error_message
    (checkpoint,) = stub.ListCheckpoints(pb.ListCheckpointsRequest(run_id=run.run_id)).checkpoints
    with pytest.raises(grpc.RpcError) as refused:
        stub.SyncWeights(pb.SyncWeightsRequest())
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    # The operator fixes the replica list; the run continues from its checkpoint, same run id and settings.
    trainer.terminate()
    fixed = start_service("trainer", *common)
    fixed_stub = pb_grpc.TrainerServiceStub(grpc.insecure_channel(fixed.address))
    remembered = fixed_stub.GetRun(pb.GetRunRequest(run_id=run.run_id)).run
    assert (remembered.state, remembered.error_message) == (
        run_pb2.RUN_STATE_FAILED,
        run.error_message,
    )
    resumed = fixed_stub.StartRun(
        pb.StartRunRequest(resume_checkpoint_id=checkpoint.checkpoint_id)
    ).run
    assert (resumed.run_id, resumed.step, resumed.config.total_steps) == (run.run_id, 0, 3)
    RunControl(TrainerClient(fixed.address), run.run_id, stack=None).wait_until_started()
    assert (
        fixed_stub.GetStatus(pb.GetStatusRequest()).run.state == run_pb2.RUN_STATE_WAITING_FOR_DATA
    )
    stopped = fixed_stub.StopRun(pb.StopRunRequest())
    assert (
        stopped.run.state == run_pb2.RUN_STATE_STOPPED and stopped.checkpoint.run_id == run.run_id
    )

    # A trainer killed during a run leaves it active on disk; the next one, told not to resume runs
    # (test_trainer_restart.py has it resuming them), reports it cut short.
    fixed_stub.StartRun(pb.StartRunRequest(resume_checkpoint_id=stopped.checkpoint.checkpoint_id))
    eventually(lambda: fixed_stub.GetStatus(pb.GetStatusRequest()).run.state == run_pb2.RUN_STATE_WAITING_FOR_DATA,
             timeout_s=60, what="the run to wait for data again")  # fmt: skip
    fixed.process.kill()
    fixed.process.wait()
    after_kill = start_service("trainer", *common, "--no-resume-runs")
    (cut_short,) = (
        pb_grpc.TrainerServiceStub(grpc.insecure_channel(after_kill.address))
        .ListRuns(pb.ListRunsRequest())
        .runs
    )
    assert (
        cut_short.state == run_pb2.RUN_STATE_FAILED
        and "stopped during the run" in cut_short.error_message
    )


@pytest.mark.parametrize(
    ("setting", "named"),
    [({"learning_rate": 0.0}, "learning_rate"), ({"groups_per_batch": 0}, "groups_per_batch"),
     ({"ppo_epochs": 0}, "ppo_epochs"), ({"dtype": 9}, "dtype")],
)  # fmt: skip
def test_a_zero_or_unknown_setting_over_grpc_is_refused_naming_the_field(
    idle_trainer, model_dir, setting, named
) -> None:
    stub = pb_grpc.TrainerServiceStub(grpc.insecure_channel(idle_trainer.address))
    config = run_config(model_dir)
    for key, value in setting.items():
        setattr(config, key, value)
    with pytest.raises(grpc.RpcError) as refused:
        stub.StartRun(pb.StartRunRequest(config=config))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (refused.value.details() or "").startswith(f"{named}:"), refused.value.details()
    assert not stub.GetStatus(pb.GetStatusRequest()).HasField("run")

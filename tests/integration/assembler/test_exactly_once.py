"""Exactly-once delivery across restarts of the assembler, the trainer and the store."""

from __future__ import annotations

import signal

import grpc
import pytest

from parity.api.assembler.v1 import assembler_service_pb2 as pb
from tests.integration.assembler.conftest import BatchConsumer
from tests.integration.assembler.test_batches import rollout
from tests.waiting import eventually

pytestmark = pytest.mark.slow


def groups(stack, count: int, start: int = 0) -> None:
    for g in range(start, start + count):
        rollout(stack, f"g{g}-a", f"g{g}", 1.0, seed=g)
        rollout(stack, f"g{g}-b", f"g{g}", 0.0, seed=100 + g)


def same_batch(first, second) -> bool:
    return (first.batch_id, first.sequence, list(first.group_ids), list(first.samples)) == (
        second.batch_id, second.sequence, list(second.group_ids), list(second.samples))  # fmt: skip


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_unacknowledged_batches_survive_an_assembler_restart_and_acknowledged_ones_never_return(
    start_stack, stop
) -> None:
    stack = start_stack()
    groups(stack, 3)
    trainer = BatchConsumer(stack.stub, "trainer", groups_per_batch=1)
    first = trainer.next()
    trainer.ack(first.batch_id)
    second = trainer.next()
    trainer.stop()
    if stop == "sigkill":
        stack.assembler.process.send_signal(signal.SIGKILL)
        stack.assembler.process.wait()
    stack.restart_assembler()

    again = BatchConsumer(stack.stub, "trainer", groups_per_batch=1, max_unacked_batches=2)
    redelivered = again.next()
    assert redelivered.redelivered and same_batch(redelivered, second)
    third = again.next()
    assert third.sequence == 3 and not third.redelivered
    assert {g for b in (first, second, third) for g in b.group_ids} == {"g0", "g1", "g2"}
    acknowledged = stack.stub.GetStats(pb.GetStatsRequest()).acknowledged_batch_count
    again.ack(second.batch_id)
    again.ack(third.batch_id)
    eventually(lambda: stack.stub.GetStats(pb.GetStatsRequest()).acknowledged_batch_count == acknowledged + 2,
               what="the assembler recording both acknowledgements")  # fmt: skip
    again.stop()

    stack.restart_assembler()
    groups(stack, 1, start=3)
    last = BatchConsumer(stack.stub, "trainer", groups_per_batch=1)
    fourth = last.next()
    assert (fourth.sequence, list(fourth.group_ids), fourth.redelivered) == (4, ["g3"], False)
    assert last.nothing_within(1.0)
    last.stop()


def test_a_trainer_that_reconnects_gets_its_unacknowledged_batches_again(start_stack) -> None:
    stack = start_stack()
    groups(stack, 2)
    trainer = BatchConsumer(stack.stub, "trainer", groups_per_batch=1)
    first = trainer.next()
    trainer.stop()
    again = BatchConsumer(stack.stub, "trainer", groups_per_batch=1)
    redelivered = again.next()
    assert redelivered.redelivered and same_batch(redelivered, first)
    again.ack(first.batch_id)
    assert again.next().sequence == 2
    again.stop()


def test_a_new_run_under_the_same_consumer_never_gets_a_batch_an_earlier_run_left_unacknowledged(
    start_stack,
) -> None:
    stack = start_stack()
    for run, seed in (("run-old", 1), ("run-new", 5)):
        rollout(stack, f"{run}-a", f"{run}-g", 1.0, seed=seed, run_id=run)
        rollout(stack, f"{run}-b", f"{run}-g", 0.0, seed=seed + 1, run_id=run)
    old = BatchConsumer(stack.stub, "trainer", groups_per_batch=1, run_id="run-old")
    left = old.next()
    old.stop()
    new = BatchConsumer(stack.stub, "trainer", groups_per_batch=1, run_id="run-new")
    batch = new.next()
    assert not batch.redelivered and list(batch.group_ids) == ["run-new-g"]
    new.ack(batch.batch_id)
    new.stop()
    resumed = BatchConsumer(stack.stub, "trainer", groups_per_batch=1, run_id="run-old")
    again = resumed.next()
    assert again.redelivered and same_batch(again, left), "the run it belongs to still gets it"
    resumed.stop()


def test_a_newer_subscription_takes_over_and_bad_acks_end_the_stream(start_stack) -> None:
    stack = start_stack()
    groups(stack, 1)
    old = BatchConsumer(stack.stub, "trainer", groups_per_batch=1)
    batch = old.next()
    new = BatchConsumer(stack.stub, "trainer", groups_per_batch=1)
    assert new.next().batch_id == batch.batch_id
    with pytest.raises(grpc.RpcError) as caught:
        old.next()
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    new.ack("trainer/999")
    with pytest.raises(grpc.RpcError) as caught:
        new.next()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "never delivered" in (
        caught.value.details() or ""
    )


def test_the_assembler_rides_out_a_store_outage(start_stack, tmp_path) -> None:
    stack = start_stack("--store-retry-s", "1")
    groups(stack, 1)
    trainer = BatchConsumer(stack.stub, "trainer", groups_per_batch=1)
    trainer.ack(trainer.next().batch_id)
    eventually(lambda: stack.stub.GetStats(pb.GetStatsRequest()).acknowledged_batch_count == 1, timeout_s=10,
               what="the batch to be acknowledged")  # fmt: skip
    stack.store.terminate()
    with pytest.raises(grpc.RpcError) as caught:
        stack.close("during-outage", reward=1.0)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE and "unavailable" in (
        caught.value.details() or ""
    )

    stack.restart_store(tmp_path)
    groups(stack, 1, start=1)
    batch = trainer.next(timeout=30)
    assert list(batch.group_ids) == ["g1"] and batch.sequence == 2
    trainer.stop()

"""Batches from real store and assembler processes: grouping, merging, rewards, flow control."""

from __future__ import annotations

import grpc
import pytest

from parity.api.assembler.v1 import assembler_service_pb2 as pb
from parity.api.assembler.v1 import trajectory_pb2
from parity.api.common.v1 import llm_call_pb2, reward_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.core import tokens
from tests.call_factory import conversation, make_call
from tests.integration.assembler.conftest import BatchConsumer
from tests.waiting import eventually


def rollout(stack, session_id: str, group_id: str, reward: float, *, turns: int = 3, size: int = 2, seed: int = 0,
            run_id: str = "") -> None:  # fmt: skip
    stack.write(
        conversation(
            session_id, turns=turns, prompt_len=20, completion_len=5, user_len=3, seed=seed
        )
    )
    stack.close(session_id, group_id=group_id, group_size=size, reward=reward, run_id=run_id)


def test_a_group_becomes_one_batch_of_merged_exact_samples(start_stack) -> None:
    stack = start_stack()
    rollout(stack, "a", "task-1", 1.0, seed=1)
    rollout(stack, "b", "task-1", 0.0, seed=2)
    trainer = BatchConsumer(stack.stub, "trainer", groups_per_batch=1)
    batch = trainer.next()
    assert (batch.batch_id, batch.sequence, list(batch.group_ids), batch.redelivered) == (
        "trainer/1",
        1,
        ["task-1"],
        False,
    )
    assert sorted((s.session_id, s.reward) for s in batch.samples) == [("a", 1.0), ("b", 0.0)]
    expected = conversation("a", turns=3, prompt_len=20, completion_len=5, user_len=3, seed=1)
    sample = next(s for s in batch.samples if s.session_id == "a")
    last = expected[-1]
    assert sample.token_ids == last.prompt_token_ids + last.choices[0].token_ids
    assert list(sample.call_ids) == [c.call_id for c in expected]
    mask = tokens.unpack_mask(sample.loss_mask)
    assert mask.sum() == 15 and sample.prompt_length == 20 and sample.episode_id == "a"
    assert batch.stats.merged_call_count == 4 and batch.stats.split_count == 0
    assert batch.stats.loss_token_fraction == pytest.approx(30 / (2 * len(mask)))
    trainer.ack(batch.batch_id)
    trainer.stop()


def test_credit_limits_unacknowledged_batches(start_stack) -> None:
    stack = start_stack()
    for g in range(3):
        rollout(stack, f"g{g}-a", f"g{g}", 1.0, seed=g)
        rollout(stack, f"g{g}-b", f"g{g}", 0.0, seed=10 + g)
    trainer = BatchConsumer(stack.stub, "t", groups_per_batch=1, max_unacked_batches=2)
    first, second = trainer.next(), trainer.next()
    assert trainer.nothing_within(1.0), "a third batch before any ack exceeds the credit"
    trainer.ack(first.batch_id)
    third = trainer.next()
    assert [b.sequence for b in (first, second, third)] == [1, 2, 3]
    assert sorted(g for b in (first, second, third) for g in b.group_ids) == ["g0", "g1", "g2"]
    trainer.stop()


def test_filters_are_applied_and_counted(start_stack) -> None:
    stack = start_stack("--max-sample-tokens", "40", "--overlong", "truncate")
    rollout(stack, "same-1", "flat", 1.0)
    rollout(stack, "same-2", "flat", 1.0, seed=3)
    rollout(stack, "ok", "mixed", 1.0, seed=4, size=3)
    stack.write(conversation("broken", turns=2, prompt_len=20, completion_len=5, seed=5))
    stack.close(
        "broken",
        group_id="mixed",
        group_size=3,
        outcome=session_pb2.SESSION_OUTCOME_FAILED,
        reward=0.0,
    )
    rollout(stack, "zero", "mixed", 0.0, seed=6, size=3)
    trainer = BatchConsumer(stack.stub, "t", groups_per_batch=1)
    batch = trainer.next()
    assert list(batch.group_ids) == ["mixed"]
    assert sorted(s.session_id for s in batch.samples) == ["ok", "zero"]
    assert all(s.truncated and len(s.loss_mask) == 40 for s in batch.samples)
    assert batch.stats.truncated_count == 2
    counts = dict(batch.stats.filtered_counts)
    assert counts["zero_variance_group"] == 1 and counts["failed_rollout"] == 1
    assert list(batch.dropped_group_ids) == ["flat"]
    stats = stack.stub.GetStats(pb.GetStatsRequest())
    assert stats.filtered_counts["zero_variance_group"] == 1 and stats.delivered_batch_count == 1
    listed = stack.stub.ListTrajectories(pb.ListTrajectoriesRequest(group_id="mixed", page_size=2))
    rest = stack.stub.ListTrajectories(
        pb.ListTrajectoriesRequest(group_id="mixed", page_token=listed.next_page_token)
    )
    assert [t.session_id for t in [*listed.trajectories, *rest.trajectories]] == [
        "ok",
        "broken",
        "zero",
    ]
    assert listed.trajectories[1].outcome == session_pb2.SESSION_OUTCOME_FAILED
    assert listed.trajectories[0].outcome == session_pb2.SESSION_OUTCOME_SUCCEEDED
    assert (
        rest.next_page_token == ""
        and rest.trajectories[0].state == trajectory_pb2.TRAJECTORY_STATE_READY
    )
    state = stack.stub.GetTrajectory(pb.GetTrajectoryRequest(session_id="same-1")).trajectory
    assert (state.state, state.filter_reason) == (
        trajectory_pb2.TRAJECTORY_STATE_FILTERED,
        "zero_variance_group",
    )
    trainer.stop()


def test_groups_dropped_while_a_batch_is_short_are_reported_with_the_next_batch(
    start_stack,
) -> None:
    stack = start_stack()
    rollout(stack, "flat-1", "flat", 1.0)
    rollout(stack, "flat-2", "flat", 1.0, seed=3)
    rollout(stack, "a-1", "a", 1.0, seed=4)
    rollout(stack, "a-2", "a", 0.0, seed=5)
    trainer = BatchConsumer(stack.stub, "t", groups_per_batch=2)
    # Two groups are ready, one is dropped: the batch waits for a replacement.
    assert trainer.nothing_within(1.0)
    rollout(stack, "b-1", "b", 1.0, seed=6)
    rollout(stack, "b-2", "b", 0.0, seed=7)
    batch = trainer.next()
    assert sorted(batch.group_ids) == ["a", "b"] and list(batch.dropped_group_ids) == ["flat"]
    assert batch.stats.filtered_counts["zero_variance_group"] == 1
    assert stack.stub.GetStats(pb.GetStatsRequest()).filtered_counts["zero_variance_group"] == 1
    trainer.stop()


def test_rewards_from_the_sdk_reach_samples_as_token_rewards(start_stack) -> None:
    stack = start_stack()
    calls = conversation("s", turns=2, prompt_len=10, completion_len=4, user_len=2)
    stack.write(calls)
    stack.stub.ReportReward(
        pb.ReportRewardRequest(
            reward=reward_pb2.Reward(
                session_id="s",
                level=reward_pb2.REWARD_LEVEL_STEP,
                call_id=calls[0].call_id,
                value=0.25,
            )
        )
    )
    stack.stub.ReportReward(
        pb.ReportRewardRequest(
            reward=reward_pb2.Reward(
                session_id="s", level=reward_pb2.REWARD_LEVEL_TRAJECTORY, value=2.0
            )
        )
    )
    stack.close("s", reward=1.0)
    batch = BatchConsumer(stack.stub, "t", groups_per_batch=1).next()
    (sample,) = batch.samples
    assert sample.reward == 3.0, "SDK 2.0 plus engine 1.0"
    rewards = tokens.unpack_floats(sample.token_rewards)
    assert rewards[13] == 0.25 and rewards.sum() == 0.25, "on the first step's last sampled token"
    trajectory = stack.stub.GetTrajectory(
        pb.GetTrajectoryRequest(session_id="s", view=pb.TRAJECTORY_VIEW_FULL)
    ).trajectory
    assert (
        trajectory.state == trajectory_pb2.TRAJECTORY_STATE_READY
        and trajectory.steps[0].reward == 0.25
    )
    assert {r.source for r in trajectory.rewards} == {"sdk", "engine"} and len(
        trajectory.samples
    ) == 1


def test_bad_input_gets_a_clear_error_and_the_rest_keeps_working(start_stack) -> None:
    stack = start_stack()
    with pytest.raises(grpc.RpcError) as caught:
        stack.stub.ReportReward(
            pb.ReportRewardRequest(
                reward=reward_pb2.Reward(
                    session_id="nope", level=reward_pb2.REWARD_LEVEL_TRAJECTORY, value=1.0
                )
            )
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND and "nope" in (
        caught.value.details() or ""
    )
    with pytest.raises(grpc.RpcError) as caught:
        stack.close("x", group_size=-1)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    stack.write([make_call("m", "malformed", [1, 2], [[3]])])
    stack.store_stub.CloseSession(
        store_pb.CloseSessionRequest(session_id="malformed", metadata={"parity.group_size": "many"})
    )
    rollout(stack, "fine", "fine", 1.0, size=1)
    batch = BatchConsumer(stack.stub, "t", groups_per_batch=1).next()
    assert [s.session_id for s in batch.samples] == ["fine"]
    stats = stack.stub.GetStats(pb.GetStatsRequest())
    assert (
        stats.error_counts["unknown_session"] == 1 and stats.error_counts["malformed_metadata"] == 1
    )
    view = stack.stub.GetTrajectory(pb.GetTrajectoryRequest(session_id="malformed")).trajectory
    assert (
        view.state == trajectory_pb2.TRAJECTORY_STATE_FILTERED
        and "parity.group_size" in view.filter_reason
    )


def test_validation_rollouts_are_kept_and_never_batched(start_stack) -> None:
    stack = start_stack()
    for name, reward in (("val-a", 1.0), ("val-b", 0.0)):
        stack.write(
            conversation(
                name, turns=1, prompt_len=10, completion_len=4, seed=len(name) + int(reward)
            )
        )
        stack.close(name, group_id="val-task", group_size=2, reward=reward, validation=True)
    rollout(stack, "train-a", "train-task", 1.0, seed=1)
    rollout(stack, "train-b", "train-task", 0.0, seed=2)
    trainer = BatchConsumer(stack.stub, "t", groups_per_batch=1)
    batch = trainer.next()
    assert list(batch.group_ids) == ["train-task"]
    assert trainer.nothing_within(1.0), "validation rollouts never make a batch"
    stats = stack.stub.GetStats(pb.GetStatsRequest())
    assert stats.validation_session_count == 2 and stats.pending_group_count == 0
    view = stack.stub.GetTrajectory(pb.GetTrajectoryRequest(session_id="val-a")).trajectory
    assert (
        view.state == trajectory_pb2.TRAJECTORY_STATE_VALIDATION
        and view.has_reward
        and view.reward == 1.0
    )
    trainer.stop()


def test_a_released_run_takes_one_short_batch_of_its_groups_with_signal_and_then_full_ones_again(
    start_stack,
) -> None:
    stack = start_stack()
    for name, group, reward, seed in (("flat-1", "flat", 1.0, 1), ("flat-2", "flat", 1.0, 2),
                                      ("a-1", "a", 1.0, 3), ("a-2", "a", 0.0, 4)):  # fmt: skip
        stack.write(conversation(name, turns=1, prompt_len=10, completion_len=4, seed=seed))
        stack.close(name, group_id=group, group_size=2, reward=reward, run_id="run")
    trainer = BatchConsumer(stack.stub, "t", groups_per_batch=3, run_id="run")
    assert trainer.nothing_within(1.0), "a full batch waits for three groups"
    released = stack.stub.ReleaseBatch(pb.ReleaseBatchRequest(run_id="run"))
    assert released.pending_group_count == 2, "both groups pend: the filters run as the batch forms"
    batch = trainer.next()
    assert list(batch.group_ids) == ["a"] and batch.stats.group_count == 1
    assert list(batch.dropped_group_ids) == ["flat"]
    trainer.ack(batch.batch_id)
    for name, group, reward, seed in (("b-1", "b", 1.0, 5), ("b-2", "b", 0.0, 6)):
        stack.write(conversation(name, turns=1, prompt_len=10, completion_len=4, seed=seed))
        stack.close(name, group_id=group, group_size=2, reward=reward, run_id="run")
    assert trainer.nothing_within(1.0), (
        "the release held for one batch: the next waits for its full size"
    )
    trainer.stop()


def capped_rollout(stack, session_id: str, group_id: str, reward: float | None, capped_episodes: int, *, seed: int,
                   failed: bool = False) -> None:  # fmt: skip
    """Two turns, then a call ingest refused at the session's cap of 2 calls."""
    calls = conversation(session_id, turns=2, prompt_len=10, completion_len=4, seed=seed)
    refused = make_call(f"{session_id}-capped", session_id, [1, 2, 3], [])
    refused.outcome, refused.session_cap = llm_call_pb2.CALL_OUTCOME_SESSION_CAPPED, "calls"
    stack.write([*calls, refused])
    outcome = (
        session_pb2.SESSION_OUTCOME_FAILED if failed else session_pb2.SESSION_OUTCOME_SUCCEEDED
    )
    fields = {"reward": reward} if reward is not None else {}
    stack.close(
        session_id,
        group_id=group_id,
        group_size=2,
        outcome=outcome,
        capped_episodes=capped_episodes,
        **fields,
    )


@pytest.mark.parametrize(("policy", "rewards"), [
    (pb.CAPPED_EPISODES_ZERO_REWARD, [("capped", 0.0), ("whole", 0.5)]),
    (pb.CAPPED_EPISODES_KEEP_REWARD, [("capped", 1.0), ("whole", 0.5)]),
], ids=["zero_reward", "keep_reward"])  # fmt: skip
def test_an_episode_cut_at_a_session_cap_trains_as_its_close_says(
    start_stack, policy, rewards
) -> None:
    stack = start_stack()
    capped_rollout(
        stack, "capped", "g", 1.0, policy, seed=1, failed=policy == pb.CAPPED_EPISODES_ZERO_REWARD
    )
    rollout(stack, "whole", "g", 0.5, turns=2, seed=2)
    trainer = BatchConsumer(stack.stub, "t", groups_per_batch=1)
    batch = trainer.next()
    assert sorted((s.session_id, s.reward) for s in batch.samples) == rewards
    assert (
        batch.stats.capped_episode_count == 1
        and "failed_rollout" not in batch.stats.filtered_counts
    )
    capped = next(s for s in batch.samples if s.session_id == "capped")
    assert list(capped.call_ids) == ["capped-t0", "capped-t1"], (
        "the refused call is no step of the episode"
    )
    trainer.stop()


def test_an_episode_cut_at_a_session_cap_is_dropped_by_default_and_counted(start_stack) -> None:
    stack = start_stack()
    capped_rollout(stack, "capped", "g", 1.0, pb.CAPPED_EPISODES_UNSPECIFIED, seed=1)
    rollout(stack, "a", "g", 0.0, seed=2, size=2)
    trainer = BatchConsumer(stack.stub, "t", groups_per_batch=1)
    batch = trainer.next()
    assert [s.session_id for s in batch.samples] == ["a"] and batch.stats.filtered_counts[
        "capped_episode"
    ] == 1
    assert batch.stats.capped_episode_count == 0
    with pytest.raises(grpc.RpcError) as refused:
        stack.close("other", capped_episodes=7)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "capped_episodes 7 is not a CappedEpisodes value" in (refused.value.details() or "")
    trainer.stop()


def test_a_feed_for_one_run_leaves_another_runs_groups_alone(start_stack) -> None:
    stack = start_stack()
    for run, seed in (("run-old", 1), ("run-new", 3), ("", 5)):
        group = f"{run or 'any'}-task"
        for offset, reward in ((0, 1.0), (1, 0.0)):
            name = f"{group}-{offset}"
            stack.write(
                conversation(name, turns=1, prompt_len=10, completion_len=4, seed=seed + offset)
            )
            stack.close(name, group_id=group, group_size=2, reward=reward, run_id=run)
    trainer = BatchConsumer(stack.stub, "t", groups_per_batch=2, run_id="run-new")
    batch = trainer.next()
    assert sorted(batch.group_ids) == ["any-task", "run-new-task"]
    assert stack.stub.GetStats(pb.GetStatsRequest()).pending_group_count == 1
    assert stack.stub.GetStats(pb.GetStatsRequest(run_id="run-new")).pending_group_count == 0
    assert stack.stub.GetStats(pb.GetStatsRequest(run_id="run-old")).pending_group_count == 1
    trainer.ack(batch.batch_id)
    trainer.stop()


def test_a_retried_failure_closed_after_its_group_is_batched_is_a_failed_rollout_not_a_late_one(
    start_stack,
) -> None:
    stack = start_stack()
    rollout(stack, "a-a1", "task-1", 1.0, seed=1)
    rollout(stack, "b-a0", "task-1", 0.0, seed=2)
    trainer = BatchConsumer(stack.stub, "t", groups_per_batch=1)
    assert sorted(s.session_id for s in trainer.next().samples) == ["a-a1", "b-a0"]
    # The engine closes a retried episode's superseded attempt after the attempt that counts.
    stack.write(conversation("a-a0", turns=2, prompt_len=20, completion_len=5, seed=3))
    stack.close(
        "a-a0",
        group_id="task-1",
        group_size=2,
        outcome=session_pb2.SESSION_OUTCOME_FAILED,
        reward=0.0,
    )
    rollout(stack, "c-a0", "task-1", 0.5, seed=4)
    late = eventually(
        lambda: known_trajectory(stack, "c-a0"), what="the assembler seeing c-a0's close"
    )
    assert late.filter_reason == "late_rollout"
    counts = stack.stub.GetStats(pb.GetStatsRequest()).filtered_counts
    assert (counts["failed_rollout"], counts["late_rollout"]) == (1, 1)
    trainer.stop()


def known_trajectory(stack, session_id: str) -> trajectory_pb2.Trajectory | None:
    try:
        return stack.stub.GetTrajectory(pb.GetTrajectoryRequest(session_id=session_id)).trajectory
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.NOT_FOUND:
            return None
        raise


def test_a_teacher_scored_group_trains_without_reward_variance_or_rewards(start_stack) -> None:
    stack = start_stack()
    for name, seed, reward in (
        ("same-1", 1, 1.0),
        ("same-2", 2, 1.0),
        ("none-1", 3, None),
        ("none-2", 4, None),
    ):
        stack.write(conversation(name, turns=2, prompt_len=10, completion_len=4, seed=seed))
        stack.close(
            name,
            group_id=name[:4],
            group_size=2,
            teacher_scored=True,
            **({"reward": reward} if reward else {}),
        )
    trainer = BatchConsumer(stack.stub, "t", groups_per_batch=2)
    batch = trainer.next()
    assert sorted(batch.group_ids) == ["none", "same"] and not batch.dropped_group_ids
    assert sorted((s.session_id, s.reward) for s in batch.samples) == [
        ("none-1", 0.0), ("none-2", 0.0), ("same-1", 1.0), ("same-2", 1.0)]  # fmt: skip
    assert "unrewarded_trajectory" not in batch.stats.filtered_counts
    trainer.stop()

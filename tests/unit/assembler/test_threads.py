"""Threads of one session: each merged on its own, each call in exactly one sample, rewards and advantages per
thread, and the counts the step metrics read."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from parity.api.common.v1 import llm_call_pb2, reward_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.core import tokens
from parity.services.assembler.batches import summarize
from parity.services.assembler.filters import FilterSettings
from parity.services.assembler.group_builder import build_group
from parity.services.assembler.rollouts import Rollout
from parity.services.assembler.samples import LengthLimit, build_samples
from parity.services.assembler.serve_command import AssemblerConfig
from parity.services.assembler.trajectories import split_trajectories
from parity.services.runtime.errors import InvalidArgument
from tests.call_factory import make_call

TRAJECTORY = reward_pb2.REWARD_LEVEL_TRAJECTORY


def interleaved(
    session_id: str, rounds: int, threads: Sequence[str] = ("", ""), named: bool = False
) -> list[llm_call_pb2.LlmCall]:
    """Conversations that share a system prompt and alternate call by call, each re-sending its own history."""
    histories = [[1, 2, 3, 100 + t] for t in range(len(threads))]
    calls = []
    for round_ in range(rounds):
        for t, history in enumerate(histories):
            completion = [1000 + 10 * round_ + t, 7]
            call = make_call(f"{session_id}-{round_}-{t}", session_id, list(history), [completion])
            if named:
                call.thread_id = threads[t]
            calls.append(call)
            history += completion + [4, 5]
    return calls


def test_interleaved_threads_train_each_token_once_and_each_call_exactly_once() -> None:
    calls = interleaved("s", rounds=8)
    (trajectory,), _ = split_trajectories("s", calls, [])
    built = build_samples(trajectory, "e", "g", LengthLimit())
    assert (built.threads, built.splits, built.merged_calls, len(built.samples)) == (2, 0, 14, 2)
    placed = [call_id for sample in built.samples for call_id in sample.call_ids]
    assert sorted(placed) == sorted(call.call_id for call in calls)
    by_id = {call.call_id: call for call in calls}
    for sample in built.samples:
        ids, mask = tokens.unpack_token_ids(sample.token_ids), tokens.unpack_mask(sample.loss_mask)
        last = by_id[sample.call_ids[-1]]
        assert sample.token_ids == last.prompt_token_ids + last.choices[0].token_ids
        sampled = [
            t
            for c in sample.call_ids
            for t in tokens.unpack_token_ids(by_id[c].choices[0].token_ids)
        ]
        assert ids[mask == 1].tolist() == sampled
    assert [s.thread_index for s in built.samples] == [0, 1]
    assert sum(built.thread_tokens.values()) == sum(len(s.loss_mask) for s in built.samples)


def test_a_reward_for_a_thread_reaches_that_threads_samples_only() -> None:
    calls = interleaved("s", rounds=2, threads=("orchestrator", "worker"), named=True)
    rewards = [reward_pb2.Reward(session_id="s", level=TRAJECTORY, value=1.0),
               reward_pb2.Reward(session_id="s", level=TRAJECTORY, value=0.5, thread_id="worker")]  # fmt: skip
    (trajectory,), unmatched = split_trajectories("s", calls, rewards)
    assert (
        unmatched == 0
        and trajectory.thread_rewards == {"worker": 0.5}
        and trajectory.total_return == 1.5
    )
    built = build_samples(trajectory, "e", "g", LengthLimit())
    assert {s.thread_id: s.reward for s in built.samples} == {"orchestrator": 1.0, "worker": 1.5}


def _rollout(session_id: str) -> Rollout:
    return Rollout(session_id=session_id, close_seq=1, outcome=session_pb2.SESSION_OUTCOME_SUCCEEDED,
                   episode_id=session_id, group_id="g", group_size=2, task_metadata={})  # fmt: skip


def _group(thread_advantage: str) -> list:
    sessions, rollouts = {}, []
    for n in range(2):
        session_id = f"s{n}"
        calls = interleaved(session_id, rounds=2, threads=("orchestrator", "worker"), named=True)
        rewards = [reward_pb2.Reward(session_id=session_id, level=TRAJECTORY, value=float(n))]
        sessions[session_id] = store_pb.SessionContents(
            session=session_pb2.Session(session_id=session_id), calls=calls, rewards=rewards
        )
        rollouts.append(_rollout(session_id))
    settings = FilterSettings(thread_advantage=thread_advantage)
    build = build_group("g", rollouts, sessions, settings, None, group_filters=True)
    assert not build.dropped and build.stats.threads == 4
    return build.samples


def test_per_role_each_named_thread_is_compared_with_its_namesakes() -> None:
    by_episode = _group("episode")
    assert {s.advantage_group for s in by_episode} == {""} and {s.group_id for s in by_episode} == {
        "g"
    }
    by_role = _group("role")
    assert sorted({s.advantage_group for s in by_role}) == ["g/orchestrator", "g/worker"]
    assert {s.group_id for s in by_role} == {"g"}


def test_batch_stats_count_threads_per_session_and_the_worst_threads_repetition() -> None:
    calls = interleaved("s", rounds=3)
    # The second thread's template rewrote its last reply: that thread trains its opening again.
    rewritten = make_call("s-rewrite", "s", [1, 2, 3, 101, 99], [[8]])
    (trajectory,), _ = split_trajectories(
        "s", [*calls, rewritten], [reward_pb2.Reward(session_id="s", level=TRAJECTORY, value=1.0)]
    )
    rollout = _rollout("s")
    contents = {
        "s": store_pb.SessionContents(
            session=session_pb2.Session(session_id="s"),
            calls=[*calls, rewritten],
            rewards=[reward_pb2.Reward(session_id="s", level=TRAJECTORY, value=1.0)],
        )
    }
    build = build_group("g", [rollout], contents, FilterSettings(), None, group_filters=False)
    stats = summarize(build.samples, 1, build.stats, build.stats.filtered)
    assert (stats.thread_count, stats.threads_per_session, stats.split_count) == (2, 2.0, 1)
    thread_one = [s for s in build.samples if s.thread_index == 1]
    trained = sum(len(s.loss_mask) for s in thread_one)
    assert stats.max_thread_repetition == pytest.approx(trained / (trained - 4))


def test_the_thread_settings_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="max_open_threads"):
        AssemblerConfig(max_open_threads=0)
    with pytest.raises(InvalidArgument, match="thread_advantage"):
        AssemblerConfig(thread_advantage="per-call")
    assert (
        AssemblerConfig(thread_advantage="role").assembly_settings().filters.thread_advantage
        == "role"
    )

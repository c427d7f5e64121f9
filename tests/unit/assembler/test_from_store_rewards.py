"""A stored session a from-store run adopted trains on the run's rule reward, never on its feedback summed again."""

from __future__ import annotations

from parity.api.common.v1 import reward_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.services.assembler import session_marks
from parity.services.assembler.filters import FilterSettings
from parity.services.assembler.group_builder import build_group
from parity.services.assembler.rollouts import rollout_from_session
from tests.call_factory import make_call

TRAJECTORY = reward_pb2.REWARD_LEVEL_TRAJECTORY


def session(
    session_id: str, rule_reward: float, from_store: bool
) -> tuple[session_pb2.Session, store_pb.SessionContents]:
    metadata = {session_marks.GROUP_ID: "g", session_marks.EPISODE_ID: session_id}
    if from_store:
        metadata[session_marks.FROM_STORE] = "true"
    closed = session_pb2.Session(session_id=session_id, metadata=metadata, state=session_pb2.SESSION_STATE_CLOSED,
                                 outcome=session_pb2.SESSION_OUTCOME_SUCCEEDED, call_count=1)  # fmt: skip
    rewards = [
        reward_pb2.Reward(
            session_id=session_id, level=TRAJECTORY, value=rule_reward, source="engine"
        ),
        reward_pb2.Reward(
            session_id=session_id, level=TRAJECTORY, value=1.0, source="feedback", name="thumbs_up"
        ),
        reward_pb2.Reward(
            session_id=session_id, level=TRAJECTORY, value=1.0, source="sdk", name="resolved"
        ),
    ]
    calls = [make_call(f"{session_id}-c", session_id, [1, 2, 3], [[4, 5]])]
    return closed, store_pb.SessionContents(session=closed, calls=calls, rewards=rewards)


def test_an_adopted_sessions_return_is_its_rule_reward_alone() -> None:
    pairs = [session("a", 0.5, from_store=True), session("b", -0.5, from_store=True)]
    rollouts = [rollout_from_session(closed) for closed, _ in pairs]
    assert all(r.from_store for r in rollouts)
    build = build_group(
        "g",
        rollouts,
        {c.session.session_id: c for _, c in pairs},
        FilterSettings(),
        None,
        group_filters=True,
    )
    assert sorted(s.reward for s in build.samples) == [-0.5, 0.5]


def test_a_rollouts_feedback_still_sums_into_its_return_when_it_was_not_adopted() -> None:
    pairs = [session("a", 0.5, from_store=False), session("b", -0.5, from_store=False)]
    rollouts = [rollout_from_session(closed) for closed, _ in pairs]
    build = build_group(
        "g",
        rollouts,
        {c.session.session_id: c for _, c in pairs},
        FilterSettings(),
        None,
        group_filters=True,
    )
    assert sorted(s.reward for s in build.samples) == [1.5, 2.5]

"""A session's page: who it belongs to (its run, or the end user it served and its tags), its
rewards, the feedback it got later, and each trajectory token by token.

Reads the store (session, calls with full token ids, rewards), the trainer (the run's
model, for its tokenizer) and the assembler (each trajectory's state and samples, for
loss masks). Opened from a step's batch (`?run=RUN_ID&step=N`), it also reads that
step's batch from the trainer, for a distillation teacher's scores of the session's
samples. Only the store is essential: without the others the page says what is missing
and shows the rest.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.assembler.v1 import trajectory_pb2
from parity.api.common.v1 import llm_call_pb2, reward_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.core.feedback_rule import is_feedback
from parity.services.console.upstream import Missing, ServiceDown, Services
from parity.services.console.views.format import enum_label, timestamp_text
from parity.services.console.views.sessions import RUN_KEY, trajectory_rewards
from parity.services.console.views.teacher_gap import DEPARTURE_GAP, mark_trajectory
from parity.services.console.views.token_text import token_texts
from parity.services.console.views.trajectory import TrajectorySection, build_trajectory

RESERVED_PREFIX = "parity."
_CALL_PAGE = 100


@dataclass(frozen=True)
class RewardRow:
    value: float
    level: str
    trajectory_name: str
    step: str
    source: str
    time: str


@dataclass(frozen=True)
class FeedbackRow:
    """A signal about the session (or one of its calls) that came after the episode: `thumbs_up`."""

    name: str
    value: float
    # What it is about: "session", "trajectory T", "call ID", "step N".
    target: str
    # The call's place on this page (`t1-call-2`), when it is about a call shown here.
    anchor: str
    source: str
    time: str


@dataclass
class SessionPage:
    session: session_pb2.Session
    trajectories: list[TrajectorySection]
    rewards: list[RewardRow]
    tokenizer: str
    banners: list[str] = field(default_factory=list)
    feedback: list[FeedbackRow] = field(default_factory=list)
    # The run and step whose teacher scores the tokens show; None when they show none.
    scored_at: tuple[str, int] | None = None

    @property
    def departure_gap(self) -> float:
        return DEPARTURE_GAP

    @property
    def state(self) -> str:
        return enum_label(session_pb2.SessionState, self.session.state, "SESSION_STATE_")

    @property
    def outcome(self) -> str:
        if self.session.state != session_pb2.SESSION_STATE_CLOSED:
            return "open"
        return enum_label(session_pb2.SessionOutcome, self.session.outcome, "SESSION_OUTCOME_")

    @property
    def open(self) -> bool:
        return self.session.state == session_pb2.SESSION_STATE_OPEN

    @property
    def run_id(self) -> str:
        return self.session.metadata.get(RUN_KEY, "")

    @property
    def end_user_id(self) -> str:
        return self.session.end_user_id

    @property
    def tags(self) -> list[str]:
        return list(self.session.tags)

    @property
    def task_metadata(self) -> list[tuple[str, str]]:
        return sorted(
            (k, v) for k, v in self.session.metadata.items() if not k.startswith(RESERVED_PREFIX)
        )

    @property
    def parity_metadata(self) -> list[tuple[str, str]]:
        return sorted(
            (k, v) for k, v in self.session.metadata.items() if k.startswith(RESERVED_PREFIX)
        )

    @property
    def times(self) -> list[tuple[str, str]]:
        s = self.session
        rows = [("created", timestamp_text(s.create_time)), ("updated", timestamp_text(s.update_time)),
                ("closed", timestamp_text(s.close_time))]  # fmt: skip
        return [(k, v) for k, v in rows if v]


def session_page(
    services: Services, session_id: str, default_tokenizer: str, run_id: str = "", step: int = 0
) -> SessionPage:
    """The session, and with a run and step, the teacher's scores of its samples at that step."""
    store = services.store
    session = store.read(
        store.client.get_session, store_pb.GetSessionRequest(session_id=session_id)
    ).session
    calls = _calls(services, session_id)
    rewards = _rewards(services, session_id)
    banners: list[str] = []
    model_path = _run_model(services, session.metadata.get(RUN_KEY, ""), banners)
    texts = token_texts(model_path, default_tokenizer)
    by_name: dict[str, list[llm_call_pb2.LlmCall]] = {}
    for call in calls:
        by_name.setdefault(call.trajectory_name, []).append(call)
    assembled = _assembled(services, session_id, sorted(by_name), banners)
    trajectories = [
        build_trajectory(name, by_name[name], assembled.get(name), texts)
        for name in sorted(by_name)
    ]
    totals = trajectory_rewards(rewards)
    for view in trajectories:
        if view.reward is None and view.name in totals:
            view.reward = totals[view.name]
    if not texts.available:
        banners.append(f"token ids are shown without text: {texts.source}")
    anchors = {
        view.call.call_id: f"t{index}-call-{view.position}"
        for index, trajectory in enumerate(trajectories, start=1)
        for view in trajectory.calls
    }
    page = SessionPage(
        session, trajectories, [_reward_row(r) for r in rewards if not is_feedback(r)], texts.source, banners,
        [_feedback_row(r, anchors) for r in rewards if is_feedback(r)],
    )  # fmt: skip
    if run_id and step:
        _add_teacher_scores(services, page, run_id, step)
    return page


def _calls(services: Services, session_id: str) -> list[llm_call_pb2.LlmCall]:
    store = services.store
    request = store_pb.ListCallsRequest(
        session_id=session_id, page_size=_CALL_PAGE, view=store_pb.CALL_VIEW_FULL
    )
    return store.read_all(store.client.list_calls, request, "calls")


def _rewards(services: Services, session_id: str) -> list[reward_pb2.Reward]:
    store = services.store
    request = store_pb.ListRewardsRequest(session_id=session_id, page_size=1000)
    return store.read_all(store.client.list_rewards, request, "rewards")


def _run_model(services: Services, run_id: str, banners: list[str]) -> str:
    if not run_id:
        return ""
    trainer = services.trainer
    try:
        return trainer.read(
            trainer.client.get_run, trainer_pb.GetRunRequest(run_id=run_id)
        ).run.config.model_path
    except ServiceDown as error:
        banners.append(f"{error}; the run's tokenizer is unknown")
    except Missing:
        pass
    return ""


def _assembled(
    services: Services, session_id: str, names: list[str], banners: list[str]
) -> dict[str, trajectory_pb2.Trajectory]:
    assembler = services.assembler

    def get(name: str) -> trajectory_pb2.Trajectory | None:
        request = assembler_pb.GetTrajectoryRequest(session_id=session_id, trajectory_name=name,
                                                    view=assembler_pb.TRAJECTORY_VIEW_FULL)  # fmt: skip
        try:
            return assembler.read(assembler.client.get_trajectory, request).trajectory
        except Missing:
            return None

    try:
        with ThreadPoolExecutor(4) as threads:
            found = dict(zip(names, threads.map(get, names), strict=True))
    except ServiceDown as error:
        banners.append(f"{error}; loss masks, samples and step rewards are not shown")
        return {}
    return {name: trajectory for name, trajectory in found.items() if trajectory is not None}


def _add_teacher_scores(services: Services, page: SessionPage, run_id: str, step: int) -> None:
    trainer = services.trainer
    request = trainer_pb.GetStepBatchRequest(run_id=run_id, step=step)
    try:
        batch = trainer.read(trainer.client.get_step_batch, request).batch
    except (ServiceDown, Missing) as error:
        page.banners.append(f"{error}; the teacher's scores at step {step} are not shown")
        return
    scored: dict[str, list[trainer_pb.TrainedSample]] = {}
    for sample in batch.samples:
        if sample.session_id == page.session.session_id and sample.teacher_logprobs:
            scored.setdefault(sample.trajectory_name, []).append(sample)
    for view in page.trajectories:
        page.banners += mark_trajectory(view, scored.get(view.name, []))
    if any(view.teacher_gaps for view in page.trajectories):
        page.scored_at = (run_id, step)


def _step(reward: reward_pb2.Reward) -> str:
    if reward.level != reward_pb2.REWARD_LEVEL_STEP:
        return ""
    if reward.WhichOneof("step") == "call_id":
        return f"call {reward.call_id}"
    return f"step {reward.step_index + 1}"


def _feedback_row(reward: reward_pb2.Reward, anchors: dict[str, str]) -> FeedbackRow:
    step = _step(reward)
    trajectory = f"trajectory {reward.trajectory_name}" if reward.trajectory_name else ""
    target = ", ".join(part for part in (trajectory, step) if part) or "session"
    anchor = anchors.get(reward.call_id, "") if reward.WhichOneof("step") == "call_id" else ""
    return FeedbackRow(reward.name or "(unnamed)", reward.value, target, anchor, reward.source,
                       timestamp_text(reward.create_time))  # fmt: skip


def _reward_row(reward: reward_pb2.Reward) -> RewardRow:
    return RewardRow(reward.value, enum_label(reward_pb2.RewardLevel, reward.level, "REWARD_LEVEL_"),
                     reward.trajectory_name, _step(reward), reward.source, timestamp_text(reward.create_time))  # fmt: skip

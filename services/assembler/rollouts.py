"""Closed sessions as the assembler tracks them: rollouts, the episodes they ran and the
groups of rollouts of one task.

A rollout is one closed session. Its episode is `parity.episode_id` (the session id
when CloseSession gave none) and its group `parity.group_id` (the episode when none):
sessions of one episode count once towards their group's size. Only the metadata of
the close is kept in memory; calls and rewards are read from the store when a batch
is built, so memory grows with the number of closed sessions, not with their tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parity.api.common.v1 import session_pb2
from parity.services.assembler import session_marks
from parity.services.assembler.session_marks import BatchMark

CAPPED_EPISODES = ("drop", "zero_reward", "keep_reward")
FAILED_OUTCOMES = (
    session_pb2.SESSION_OUTCOME_FAILED,
    session_pb2.SESSION_OUTCOME_TIMED_OUT,
    session_pb2.SESSION_OUTCOME_CANCELLED,
)


@dataclass(slots=True)
class Rollout:
    session_id: str
    close_seq: int
    outcome: int
    episode_id: str
    group_id: str
    # Episodes the group will have, as CloseSession said; 0 when it did not.
    group_size: int
    task_metadata: dict[str, str]
    call_count: int = 0
    batch: BatchMark | None = None
    # Why the rollout will never be trained on (a filter name), once decided.
    filtered: str = ""
    # The message recorded with `filtered`, for bad input.
    error: str = ""
    # Whether the reward function and judge have scored it (or there are none).
    scored: bool = False
    # A validation rollout: scored and listed, never grouped or batched.
    validation: bool = False
    # The training run it is for; empty for any.
    run_id: str = ""
    # What it trains as if its session hit a cap: drop, zero_reward or keep_reward.
    capped_episodes: str = "drop"
    # A distillation run's: a teacher scores its sampled tokens, so it has signal without a reward.
    teacher_scored: bool = False
    # A stored production session a from-store run adopted: its engine reward is the run's feedback rule
    # applied to its feedback, so the feedback itself is not summed again.
    from_store: bool = False

    @property
    def failed(self) -> bool:
        return self.outcome in FAILED_OUTCOMES


def rollout_from_session(session: session_pb2.Session) -> Rollout:
    """The rollout a closed session ran. Malformed Parity metadata does not raise: the
    rollout comes back filtered as "malformed_metadata", with the reason."""
    metadata = dict(session.metadata)
    episode_id = metadata.get(session_marks.EPISODE_ID) or session.session_id
    rollout = Rollout(
        session_id=session.session_id,
        close_seq=0,
        outcome=session.outcome,
        episode_id=episode_id,
        group_id=metadata.get(session_marks.GROUP_ID) or episode_id,
        group_size=0,
        task_metadata=session_marks.task_metadata(metadata),
        call_count=session.call_count,
        filtered=metadata.get(session_marks.FILTERED, ""),
        error=metadata.get(session_marks.ERROR, ""),
        validation=metadata.get(session_marks.VALIDATION) == "true",
        run_id=metadata.get(session_marks.RUN_ID, ""),
        capped_episodes=metadata.get(session_marks.CAPPED_EPISODES, "drop"),
        teacher_scored=metadata.get(session_marks.TEACHER_SCORED) == "true",
        from_store=metadata.get(session_marks.FROM_STORE) == "true",
    )
    problems = []
    size = metadata.get(session_marks.GROUP_SIZE, "0")
    if size.isdigit():
        rollout.group_size = int(size)
    else:
        problems.append(f"{session_marks.GROUP_SIZE} must be a non-negative integer, got {size!r}")
    if rollout.capped_episodes not in CAPPED_EPISODES:
        problems.append(f"{session_marks.CAPPED_EPISODES} must be one of {', '.join(CAPPED_EPISODES)}, "
                        f"got {rollout.capped_episodes!r}")  # fmt: skip
    if session_marks.BATCH in metadata:
        try:
            rollout.batch = BatchMark.decode(metadata[session_marks.BATCH])
        except ValueError as error:
            problems.append(str(error))
    if problems and not rollout.filtered:
        rollout.filtered, rollout.error = (
            "malformed_metadata",
            f"session {session.session_id!r}: " + "; ".join(problems),
        )
    return rollout


@dataclass(slots=True)
class Group:
    group_id: str
    rollouts: list[Rollout] = field(default_factory=list)
    # Monotonic time of the latest rollout to join, for the idle release.
    last_join: float = 0.0
    # Set once the group is in a batch or dropped whole: later rollouts are late.
    settled: bool = False

    @property
    def first_close_seq(self) -> int:
        return self.rollouts[0].close_seq

    def expected_size(self, default_size: int) -> int:
        sizes = [r.group_size for r in self.rollouts if r.group_size]
        return max(sizes) if sizes else default_size

    def episode_count(self) -> int:
        return len({r.episode_id for r in self.rollouts})

    @property
    def run_id(self) -> str:
        return self.rollouts[0].run_id if self.rollouts else ""

    def is_ready(self, now: float, default_size: int, idle_s: float) -> bool:
        """Every expected episode has closed, or none has joined for idle_s seconds."""
        size = self.expected_size(default_size)
        return (size > 0 and self.episode_count() >= size) or now - self.last_join >= idle_s

    def ready_at(self, idle_s: float) -> float:
        """When the idle release will make the group ready."""
        return self.last_join + idle_s

    def trainable(self) -> list[Rollout]:
        return [r for r in self.rollouts if not r.filtered and r.batch is None]

"""A from-store run's steps, fed with stored production sessions instead of rollouts of tasks.

Each step adopts a batch's worth of eligible sessions (`store_sessions`), oldest first:
it closes each one through the assembler for this run, in groups of `rollouts_per_task`
sessions, with the reward the run's feedback rule gave it. A group's sessions answered
different users, so GRPO's group baseline is the mean reward of sessions of the same time.
The assembler then builds their samples token-exact from the stored calls, as for any
rollout; the trainer corrects for the older policies that sampled them with truncated
importance weights against the stored logprobs (`tis_cap`).

When the store holds fewer usable sessions than a step wants, the step trains on the
groups it could form (a short batch). With none at all, the run ends and says why:
failed before its first step, completed after it, or, `continuous`, it waits for new
sessions, looking every `store_poll_s`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence

import grpc
import structlog

from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.common.v1 import session_pb2
from parity.api.trainer.v1 import run_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import AssemblerClient, RPCError, StoreClient
from parity.training.run_control import RunEnded
from parity.training.settings import TrainSettings
from parity.training.store_sessions import (
    SKIP_REASONS,
    Eligible,
    Selection,
    StoreFilters,
    select_sessions,
    skip_summary,
)

log = structlog.get_logger(__name__)

# How long the trainer waits for data, every adopted session closed, before a step adopts more sessions.
TOP_UP_IDLE_S = 2.0
# Sessions in a group: fewer carry no comparison (GRPO's baseline is the group's mean).
MIN_GROUP = 2


class StoreExhausted(RunEnded):
    """The store has no usable sessions left for the run's next step."""


class StoreSupply:
    def __init__(
        self, store: StoreClient, assembler: AssemblerClient, settings: TrainSettings, run_id: str,
        policy_version: Callable[[], int], raise_if_ended: Callable[[], None],
    ) -> None:  # fmt: skip
        """`raise_if_ended` raises once the trainer's run has ended (or the stack is down): a continuous run
        waiting for sessions stops waiting then."""
        self.store = store
        self.assembler = assembler
        self.settings = settings
        self.run_id = run_id
        self.rule = settings.feedback
        self.filters = StoreFilters.of(settings)
        self._policy_version = policy_version
        self._raise_if_ended = raise_if_ended
        self.used = 0
        self.skipped: Counter[str] = Counter()
        self._step_used = 0
        self._step_deleted = 0
        self._groups = 0
        self._looked_at = 0.0

    # The driver's step loop calls these as it calls BatchSupply's.
    def begin(self, step: int) -> list[object]:
        self._step_used = self._step_deleted = 0
        wanted = self.settings.groups_per_batch
        while True:
            # A step short of sessions trains on the groups it has: top_up releases them once the trainer waits.
            if self._adopt(step, wanted, self._select()):
                return []
            if not self.settings.continuous:
                raise self._exhausted(step)
            log.info("waiting_for_sessions", step=step, poll_s=self.settings.store_poll_s)
            self._raise_if_ended()
            time.sleep(self.settings.store_poll_s)

    def top_up(self, futures: list[object], status: trainer_pb.GetStatusResponse, idle_since: float | None,
               step: int) -> float | None:  # fmt: skip
        """The assembler dropped groups (their rewards were all equal): adopt more sessions, else train on what
        is pending, else end (or, continuous, keep looking)."""
        if status.run.state != run_pb2.RUN_STATE_WAITING_FOR_DATA:
            return None
        now = time.monotonic()
        if idle_since is None:
            return now
        every = self.settings.store_poll_s if self.settings.continuous else TOP_UP_IDLE_S
        if now - idle_since < TOP_UP_IDLE_S or now - self._looked_at < every:
            return idle_since
        pending = self._pending_groups()
        missing = self.settings.groups_per_batch - pending
        if missing <= 0:
            return None
        if self._adopt(step, missing, self._select()):
            return None
        if pending:
            self._release(step, pending)
            return None
        if self.settings.continuous:
            return idle_since
        raise self._exhausted(step)

    def raise_if_agent_failing(self, futures: Sequence[object], step: int) -> None:
        """Stored sessions have no agent that could fail."""

    def step_values(self) -> dict[str, float]:
        values = {
            "store_sessions_used": float(self._step_used),
            "store_sessions_deleted": float(self._step_deleted),
        }
        values |= {
            f"store_skipped_{reason}": float(self.skipped[reason]) for reason in SKIP_REASONS
        }
        return values

    # Choosing and adopting sessions.
    def _select(self) -> Selection:
        self._looked_at = time.monotonic()
        selection = select_sessions(self.store, self.rule, self.filters, self._policy_version())
        self.skipped = selection.skipped
        log.info("store_sessions_selected", run_id=self.run_id, summary=selection.summary)
        return selection

    def _adopt(self, step: int, groups: int, selection: Selection) -> int:
        """Up to `groups` groups of `rollouts_per_task` sessions closed for this run; returns how many formed."""
        size = self.settings.rollouts_per_task
        eligible = selection.eligible[: groups * size]
        if len(eligible) < MIN_GROUP:
            return 0
        chunks = into_groups(eligible, size)
        for chunk in chunks:
            self._groups += 1
            self._close(f"{self.run_id}-s{step:05d}-store{self._groups:04d}", chunk)
        return len(chunks)

    def _close(self, group_id: str, sessions: Sequence[Eligible]) -> None:
        for session in sessions:
            request = assembler_pb.CloseSessionRequest(
                session_id=session.session_id, outcome=session_pb2.SESSION_OUTCOME_SUCCEEDED, reward=session.reward,
                group_id=group_id, episode_id=session.session_id, group_size=len(sessions), run_id=self.run_id,
                from_store=True,
            )  # fmt: skip
            try:
                self.assembler.close_session(request)
            except RPCError as error:
                if error.code != grpc.StatusCode.NOT_FOUND:
                    raise
                # Deleted since it was selected (an end user's deletion request): never trained on.
                self._step_deleted += 1
                continue
            self.used += 1
            self._step_used += 1

    def _release(self, step: int, groups: int) -> None:
        self.assembler.release_batch(assembler_pb.ReleaseBatchRequest(run_id=self.run_id))
        log.info(
            "short_batch_released", step=step, groups=groups, wanted=self.settings.groups_per_batch
        )

    def _pending_groups(self) -> int:
        return self.assembler.get_stats(
            assembler_pb.GetStatsRequest(run_id=self.run_id)
        ).pending_group_count

    def _exhausted(self, step: int) -> StoreExhausted:
        where = f"the store has no usable sessions for step {step} (skipped: {skip_summary(self.skipped)})"
        if self._step_used:
            where += f"; the assembler dropped the groups of the {self._step_used} sessions this step adopted (rewards all equal)"
        if step == 1:
            return StoreExhausted(
                "failed",
                f"{where}; see docs/production.md for the filters and the feedback rule",
                0,
            )
        return StoreExhausted("completed", f"{where}; {self.used} sessions trained", step - 1)


def into_groups(sessions: Sequence[Eligible], size: int) -> list[list[Eligible]]:
    """`sessions` in groups of `size`; a last one too small to compare within joins the one before."""
    groups = [list(sessions[start : start + size]) for start in range(0, len(sessions), size)]
    if len(groups) > 1 and len(groups[-1]) < MIN_GROUP:
        last = groups.pop()
        groups[-1] += last
    return groups

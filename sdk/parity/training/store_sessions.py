"""Which stored production sessions a from-store run may train on now, and why the others may not.

A deployed agent's sessions stay open in the token store: nobody closes a conversation.
One counts as ended once it had no call for `store_idle_minutes`; a from-store run
adopts it by closing it (`parity.from_store`), so each session trains once, and the
sessions still open are the ones no run has used. Each open session is either eligible,
with the reward the run's feedback rule gives it, or skipped for one reason:

- `active`: it had a call within the idle time; it may not be over.
- `filtered_out`: its calls were sampled by a policy version below `store_min_policy_version`,
  or it has no call.
- `too_stale`: its last call is older than `store_max_age_hours`, or its oldest call was
  sampled more than `store_max_policy_lag` versions behind the trainer.
- `awaiting_feedback`: its feedback window is still open.
- `no_feedback`: no counted signal, and no default reward.

Tags filter in the store (`ListSessions.tags`), so sessions without them are never read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from parity.api.common.v1 import session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import StoreClient
from parity.core.feedback_rule import FeedbackRule
from parity.training.settings import TrainSettings

SKIP_REASONS = ("active", "filtered_out", "too_stale", "awaiting_feedback", "no_feedback")
_PAGE = 1000
# Sessions read together: BASIC calls carry no tokens, so a chunk stays far under the message limit.
_READ_CHUNK = 200


@dataclass(frozen=True)
class StoreFilters:
    tags: tuple[str, ...] = ()
    min_policy_version: int | None = None
    max_age: timedelta | None = None
    max_policy_lag: int | None = None
    idle: timedelta = timedelta(minutes=10)

    @classmethod
    def of(cls, settings: TrainSettings) -> StoreFilters:
        return cls(
            tags=settings.store_tag_list,
            min_policy_version=settings.store_min_policy_version,
            max_age=timedelta(hours=settings.store_max_age_hours) if settings.store_max_age_hours is not None else None,
            max_policy_lag=settings.store_max_policy_lag, idle=timedelta(minutes=settings.store_idle_minutes),
        )  # fmt: skip


@dataclass(frozen=True)
class Eligible:
    session_id: str
    reward: float
    last_call: datetime


@dataclass
class Selection:
    eligible: list[Eligible] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def summary(self) -> str:
        return f"{len(self.eligible)} usable, skipped {sum(self.skipped.values())} ({skip_summary(self.skipped)})"


def skip_summary(skipped: Counter[str]) -> str:
    """`no_feedback: 3, too_stale: 1`, or `none`."""
    return ", ".join(f"{reason}: {count}" for reason, count in sorted(skipped.items())) or "none"


def select_sessions(
    store: StoreClient,
    rule: FeedbackRule,
    filters: StoreFilters,
    policy_version: int,
    now: datetime | None = None,
) -> Selection:
    """Every open session of the store, sorted into eligible (oldest last call first) and skipped by reason."""
    now = now or datetime.now(UTC)
    selection = Selection()
    for contents in _open_sessions(store, filters.tags):
        reward, skip = classify(contents, rule, filters, policy_version, now)
        if skip:
            selection.skipped[skip] += 1
        else:
            assert reward is not None
            selection.eligible.append(
                Eligible(contents.session.session_id, reward, _last_call(contents.session))
            )
    selection.eligible.sort(key=lambda e: (e.last_call, e.session_id))
    return selection


def classify(
    contents: store_pb.SessionContents,
    rule: FeedbackRule,
    filters: StoreFilters,
    policy_version: int,
    now: datetime,
) -> tuple[float | None, str]:
    """The session's reward by the rule, or the reason it is skipped now."""
    last_call = _last_call(contents.session)
    if now - last_call < filters.idle:
        return None, "active"
    versions = [call.policy_version for call in contents.calls]
    if not versions or (
        filters.min_policy_version is not None and min(versions) < filters.min_policy_version
    ):
        return None, "filtered_out"
    if filters.max_age is not None and now - last_call > filters.max_age:
        return None, "too_stale"
    if (
        filters.max_policy_lag is not None
        and policy_version - min(versions) > filters.max_policy_lag
    ):
        return None, "too_stale"
    decision = rule.decide(contents.rewards, last_call, now)
    return decision.reward, decision.skip


def _last_call(session: session_pb2.Session) -> datetime:
    return session.update_time.ToDatetime(UTC)


def _open_sessions(store: StoreClient, tags: Sequence[str]) -> Iterator[store_pb.SessionContents]:
    request = store_pb.ListSessionsRequest(page_size=_PAGE, state=session_pb2.SESSION_STATE_OPEN, tags=list(tags),
                                           order=store_pb.SESSION_ORDER_OLDEST_FIRST)  # fmt: skip
    while True:
        page = store.list_sessions(request)
        ids = [session.session_id for session in page.sessions]
        for start in range(0, len(ids), _READ_CHUNK):
            read = store_pb.BatchGetSessionsRequest(session_ids=ids[start : start + _READ_CHUNK],
                                                    view=store_pb.CALL_VIEW_BASIC)  # fmt: skip
            # A session deleted between the list and the read is simply not there.
            yield from store.batch_get_sessions(read).sessions
        if not page.next_page_token:
            return
        request.page_token = page.next_page_token

"""The session list: newest first, filtered by run, task, outcome, end user, tags, reward
range and id.

Run, task, outcome, end user, tags and id are filters of the store's ListSessions, so
paging stays a range scan. Rewards live beside sessions, not in them: a reward range is
applied here, to whole store pages, until a page of matches is found or `SCAN_LIMIT`
sessions were read; the page then says how far it looked and links on from there.
Feedback (named signals that came after the episode) is not part of a session's reward.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from urllib.parse import urlencode

from parity.api.common.v1 import reward_pb2, session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.core.attribution import check_end_user_id, normalize_tags
from parity.services.console.upstream import Services
from parity.services.console.views.format import enum_label, timestamp_text

RUN_KEY = "parity.run_id"
TASK_KEY = "task"
GROUP_KEY = "parity.group_id"
VALIDATION_KEY = "parity.validation"
SCAN_LIMIT = 2000
FRESH_S = 10.0
# Tags a row shows; the rest are counted, and named in its tooltip.
SHOWN_TAGS = 4
_ANY_STATE, _ANY_OUTCOME = (
    session_pb2.SESSION_STATE_UNSPECIFIED,
    session_pb2.SESSION_OUTCOME_UNSPECIFIED,
)
OUTCOMES = {
    "open": (session_pb2.SESSION_STATE_OPEN, _ANY_OUTCOME),
    "succeeded": (_ANY_STATE, session_pb2.SESSION_OUTCOME_SUCCEEDED),
    "failed": (_ANY_STATE, session_pb2.SESSION_OUTCOME_FAILED),
    "timed_out": (_ANY_STATE, session_pb2.SESSION_OUTCOME_TIMED_OUT),
    "cancelled": (_ANY_STATE, session_pb2.SESSION_OUTCOME_CANCELLED),
}


@dataclass(frozen=True)
class SessionFilters:
    run: str = ""
    task: str = ""
    outcome: str = ""
    reward_min: str = ""
    reward_max: str = ""
    session: str = ""
    user: str = ""
    # Comma-separated, sorted, without repeats: a session must carry every one.
    tag: str = ""

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> tuple[SessionFilters, list[str]]:
        """The filters a query string asks for, and what is wrong with it (those filters are left out)."""
        values = {f.name: query.get(f.name, "").strip()[:256] for f in fields(cls)}
        problems: list[str] = []
        # Checked whole, not cut to 256: a cut id would name another user, a cut list other tags.
        values["user"] = query.get("user", "").strip()
        try:
            check_end_user_id(values["user"], "user")
        except ValueError as error:
            problems.append(str(error))
            values["user"] = ""
        try:
            values["tag"] = ",".join(parse_tag_filter(query.get("tag", "")))
        except ValueError as error:
            problems.append(str(error))
            values["tag"] = ""
        if values["outcome"] and values["outcome"] not in OUTCOMES:
            problems.append(f"outcome must be one of {', '.join(OUTCOMES)}")
            values["outcome"] = ""
        for name in ("reward_min", "reward_max"):
            if values[name] and not _is_number(values[name]):
                problems.append(f"{name.replace('_', ' ')} must be a number, got {values[name]!r}")
                values[name] = ""
        return cls(**values), problems

    @property
    def bounds(self) -> tuple[float, float] | None:
        if not self.reward_min and not self.reward_max:
            return None
        return (
            float(self.reward_min) if self.reward_min else -math.inf,
            float(self.reward_max) if self.reward_max else math.inf,
        )

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(self.tag.split(",")) if self.tag else ()

    def query(self, **extra: str) -> str:
        pairs = {f.name: getattr(self, f.name) for f in fields(self)} | extra
        return urlencode({k: v for k, v in pairs.items() if v})

    def query_with_tag(self, tag: str) -> str:
        """These filters narrowed to sessions that also carry `tag`."""
        return self.query(tag=",".join(sorted({*self.tags, tag})))

    def request(self, page_size: int, page_token: str) -> store_pb.ListSessionsRequest:
        state, outcome = OUTCOMES.get(self.outcome, (_ANY_STATE, _ANY_OUTCOME))
        metadata = {
            key: value for key, value in ((RUN_KEY, self.run), (TASK_KEY, self.task)) if value
        }
        return store_pb.ListSessionsRequest(
            page_size=page_size, page_token=page_token, order=store_pb.SESSION_ORDER_NEWEST_FIRST, state=state,
            outcome=outcome, metadata=metadata, session_id_prefix=self.session, end_user_id=self.user,
            tags=self.tags,
        )  # fmt: skip


def parse_tag_filter(text: str) -> tuple[str, ...]:
    """`prod, checkout` as the tags a session must all carry, sorted; raises ValueError naming the filter."""
    return normalize_tags((part.strip() for part in text.split(",") if part.strip()), "tag")


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    state: str
    outcome: str
    run_id: str
    task: str
    group_id: str
    validation: bool
    end_user_id: str
    tags: tuple[str, ...]
    call_count: int
    reward: float | None
    rewards_text: str
    created: str
    updated: str
    error: str
    # Changed in the last few seconds: the live list marks it.
    fresh: bool

    @property
    def shown_tags(self) -> tuple[str, ...]:
        return self.tags[:SHOWN_TAGS]

    @property
    def more_tags(self) -> tuple[str, ...]:
        return self.tags[SHOWN_TAGS:]


@dataclass
class SessionList:
    rows: list[SessionRow]
    next_page_token: str
    scanned: int
    """Sessions read to fill the page; more than the rows when a reward range filtered them."""


def list_sessions(
    services: Services, filters: SessionFilters, page_size: int, page_token: str
) -> SessionList:
    store = services.store
    bounds = filters.bounds
    rows: list[SessionRow] = []
    scanned = 0
    token = page_token
    while True:
        page = store.read(store.client.list_sessions, filters.request(page_size, token))
        scanned += len(page.sessions)
        token = page.next_page_token
        rewards = _rewards(services, [s.session_id for s in page.sessions])
        for session in page.sessions:
            row = _row(session, rewards.get(session.session_id, []))
            if bounds is None or (row.reward is not None and bounds[0] <= row.reward <= bounds[1]):
                rows.append(row)
        if bounds is None or not token or len(rows) >= page_size or scanned >= SCAN_LIMIT:
            return SessionList(rows, token, scanned)


def _rewards(services: Services, session_ids: list[str]) -> dict[str, list[reward_pb2.Reward]]:
    if not session_ids:
        return {}
    store = services.store
    # BASIC: sessions with their rewards and call summaries, without a single token array.
    found = store.read(store.client.batch_get_sessions,
                       store_pb.BatchGetSessionsRequest(session_ids=session_ids, view=store_pb.CALL_VIEW_BASIC))  # fmt: skip
    return {contents.session.session_id: list(contents.rewards) for contents in found.sessions}


def trajectory_rewards(rewards: list[reward_pb2.Reward]) -> dict[str, float]:
    """Trajectory-level rewards summed per trajectory name, as the assembler sums them: feedback
    signals included, though the session page lists them apart."""
    totals: dict[str, float] = {}
    for reward in rewards:
        if reward.level == reward_pb2.REWARD_LEVEL_TRAJECTORY:
            totals[reward.trajectory_name] = totals.get(reward.trajectory_name, 0.0) + reward.value
    return totals


def _row(session: session_pb2.Session, rewards: list[reward_pb2.Reward]) -> SessionRow:
    totals = trajectory_rewards(rewards)
    reward = sum(totals.values()) if totals else None
    text = (
        ", ".join(f"{name}: {value:.4g}" for name, value in sorted(totals.items()))
        if len(totals) > 1
        else ""
    )
    metadata = session.metadata
    closed = session.state == session_pb2.SESSION_STATE_CLOSED
    return SessionRow(
        session_id=session.session_id, state=enum_label(session_pb2.SessionState, session.state, "SESSION_STATE_"),
        outcome=enum_label(session_pb2.SessionOutcome, session.outcome, "SESSION_OUTCOME_") if closed else "open",
        run_id=metadata.get(RUN_KEY, ""), task=metadata.get(TASK_KEY, ""), group_id=metadata.get(GROUP_KEY, ""),
        validation=metadata.get(VALIDATION_KEY) == "true", end_user_id=session.end_user_id, tags=tuple(session.tags),
        call_count=session.call_count, reward=reward,
        rewards_text=text, created=timestamp_text(session.create_time), updated=timestamp_text(session.update_time),
        error=session.error_message, fresh=time.time() - session.update_time.ToNanoseconds() / 1e9 < FRESH_S,
    )  # fmt: skip


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False

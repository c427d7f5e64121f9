"""Feedback by policy version: how end users rated what each policy served them.

While a canary runs, its sessions carry the candidate's policy version and the rest the
serving one, so this page is the comparison a canary runs for; after a promotion, it
compares the versions before and after. It reads the newest production sessions (those
of no training run), filtered by end user and tags, up to `SCAN_LIMIT`, with their calls
and rewards but no token arrays. A session counts under the policy version of its last
policy call; its feedback is its named signals (`parity.core.feedback_rule.is_feedback`).
Versions are labelled from the trainer's promotions when it answers.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from parity.api.common.v1 import llm_call_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.trainer.v1 import promotion_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.core.feedback_rule import is_feedback
from parity.services.console.upstream import Missing, Refused, ServiceDown, Services
from parity.services.console.views.sessions import RUN_KEY, SessionFilters

SCAN_LIMIT = 2000
_PAGE = 200


@dataclass(frozen=True)
class SignalStats:
    name: str
    count: int
    mean: float


@dataclass(frozen=True)
class VersionRow:
    policy_version: int
    label: str
    sessions: int
    with_feedback: int
    feedback_mean: float | None
    """The mean, over sessions with feedback, of the sum of their signals."""
    signals: tuple[SignalStats, ...]

    @property
    def feedback_share(self) -> float:
        return self.with_feedback / self.sessions if self.sessions else 0.0


@dataclass
class VersionPage:
    rows: list[VersionRow]
    scanned: int
    complete: bool
    """Every matching session was read; False when SCAN_LIMIT cut the scan."""
    signal_names: list[str] = field(default_factory=list)


@dataclass
class _Tally:
    sessions: int = 0
    with_feedback: int = 0
    feedback_total: float = 0.0
    signals: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


def feedback_by_version(
    services: Services, filters: SessionFilters, limit: int = SCAN_LIMIT
) -> VersionPage:
    store = services.store
    tallies: dict[int, _Tally] = defaultdict(_Tally)
    scanned, token = 0, ""
    while scanned < limit:
        request = SessionFilters(user=filters.user, tag=filters.tag).request(
            min(_PAGE, limit - scanned), token
        )
        page = store.read(store.client.list_sessions, request)
        scanned += len(page.sessions)
        ids = [s.session_id for s in page.sessions if not s.metadata.get(RUN_KEY)]
        if ids:
            found = store.read(store.client.batch_get_sessions,
                               store_pb.BatchGetSessionsRequest(session_ids=ids, view=store_pb.CALL_VIEW_BASIC))  # fmt: skip
            for contents in found.sessions:
                _count(tallies, contents)
        token = page.next_page_token
        if not token:
            break
    labels = _labels(services)
    rows = [
        VersionRow(
            version,
            labels.get(version, ""),
            tally.sessions,
            tally.with_feedback,
            tally.feedback_total / tally.with_feedback if tally.with_feedback else None,
            tuple(
                SignalStats(name, len(values), sum(values) / len(values))
                for name, values in sorted(tally.signals.items())
            ),
        )  # fmt: skip
        for version, tally in sorted(tallies.items(), reverse=True)
    ]
    names = sorted({signal.name for row in rows for signal in row.signals})
    return VersionPage(rows, scanned, complete=not token, signal_names=names)


def _count(tallies: dict[int, _Tally], contents: store_pb.SessionContents) -> None:
    policy_calls = [call for call in contents.calls if call.kind != llm_call_pb2.CALL_KIND_EXTERNAL]
    if not policy_calls:
        return
    tally = tallies[policy_calls[-1].policy_version]
    tally.sessions += 1
    feedback = [reward for reward in contents.rewards if is_feedback(reward)]
    if feedback:
        tally.with_feedback += 1
        tally.feedback_total += sum(reward.value for reward in feedback)
        for reward in feedback:
            tally.signals[reward.name or reward.source].append(reward.value)


def _labels(services: Services) -> dict[int, str]:
    """What the trainer's promotions made of each version; none when it does not answer."""
    trainer = services.trainer
    try:
        promotions = trainer.read(
            trainer.client.list_promotions, trainer_pb.ListPromotionsRequest(page_size=100)
        ).promotions
    except (ServiceDown, Refused, Missing):
        return {}
    labels: dict[int, str] = {}
    for promotion in reversed(promotions):  # oldest first: a later decision on a version names it
        if promotion.outcome == promotion_pb2.PROMOTION_OUTCOME_CANARY:
            labels[promotion.policy_version] = (
                f"canary ({promotion.canary_share:.0%}) of {promotion.checkpoint_id}"
            )
        elif promotion.outcome == promotion_pb2.PROMOTION_OUTCOME_PROMOTED:
            labels[promotion.policy_version] = f"promoted {promotion.checkpoint_id}"
        elif (
            promotion.outcome == promotion_pb2.PROMOTION_OUTCOME_ROLLED_BACK
            and not promotion.reason.startswith("ended")
        ):
            labels[promotion.policy_version] = (
                f"rollback to {promotion.checkpoint_id or 'the start model'}"
            )
    return labels

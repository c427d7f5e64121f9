"""One commit function per kind of write, run on the writer thread (see write_queue.py).

Each takes the payloads of the writes grouped into one transaction and returns one
result per payload, or the error that refused that payload alone.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parity.api.common.v1 import llm_call_pb2, reward_pb2
from parity.core.ids import new_id
from parity.services.runtime.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from parity.services.store import call_codec
from parity.services.store.backends.base import StoreBackend
from parity.services.store.call_codec import CallTokens
from parity.services.store.call_reader import CallReader, LruCache
from parity.services.store.records import (
    SESSION_STATE_CLOSED,
    CallBatch,
    CallRow,
    MetadataUpdate,
    RewardRow,
    SessionClose,
    SessionTouch,
)
from parity.services.store.reward_conflicts import conflict_message, reward_content


@dataclass(frozen=True)
class WriteResult:
    written: int
    duplicates: int


class StoreCommits:
    def __init__(
        self, backend: StoreBackend, reader: CallReader, trajectory_cache_size: int
    ) -> None:
        self.backend = backend
        self.reader = reader
        # Writer-only: the latest call of each (session, trajectory), to splice the next against.
        self._tails = LruCache(trajectory_cache_size)

    def calls(self, requests: list[Sequence[llm_call_pb2.LlmCall]]) -> list[WriteResult]:
        now = time.time()
        # Each read of a message's field builds a new string: read each call's ids once.
        requests_ids = [
            [(call, call.call_id, call.session_id, call.trajectory_name) for call in calls]
            for calls in requests
        ]
        existing = self.backend.existing_call_ids(
            call_id for calls in requests_ids for _, call_id, _, _ in calls
        )
        self._load_tails(
            {
                (session_id, name)
                for calls in requests_ids
                for _, call_id, session_id, name in calls
                if call_id not in existing
            }
        )
        batch = CallBatch()
        touches: dict[str, SessionTouch] = {}
        # Tails as they will be once this batch commits; published only after it does.
        pending_tails: dict[tuple[str, str], CallTokens] = {}
        results = []
        for calls in requests_ids:
            written = 0
            for call, call_id, session_id, name in calls:
                if call_id in existing:
                    continue
                existing.add(call_id)
                key = (session_id, name)
                ref = pending_tails.get(key) or self._tails.get(key)
                row, pending_tails[key] = call_codec.encode_call(call, call_id, key, ref, now)
                batch.calls.append(row)
                touch = touches.get(session_id)
                if touch is None:
                    # Most calls carry neither; copying an empty protobuf container costs more
                    # than the test.
                    parents, metadata = call.parent_session_ids, call.metadata
                    touch = touches[session_id] = SessionTouch(
                        session_id,
                        list(parents) if parents else [],
                        dict(metadata) if metadata else {},
                        0,
                        now,
                    )
                # The end user and tags of the batch's first call of the session that carries them.
                if not touch.end_user_id:
                    touch.end_user_id = call.end_user_id
                if not touch.tags and call.tags:
                    touch.tags = list(call.tags)
                touch.added_calls += 1
                written += 1
            results.append(WriteResult(written, len(calls) - written))
        if batch.calls:
            batch.sessions = list(touches.values())
            self.backend.commit_calls(batch)
            for key, tokens in pending_tails.items():
                self._tails.put(key, tokens)
        return results

    def rewards(self, requests: list[Sequence[reward_pb2.Reward]]) -> list[Any]:
        now = time.time()
        known = self.backend.get_sessions(
            {r.session_id for rewards in requests for r in rewards}
        ).keys()
        step_calls = self.backend.get_call_rows(
            {
                r.call_id
                for rewards in requests
                for r in rewards
                if r.WhichOneof("step") == "call_id"
            }
        )
        # Each id's reward as stored, then as accepted earlier in this group.
        reward_ids = {r.reward_id for rewards in requests for r in rewards if r.reward_id}
        taken = self.backend.get_reward_rows(reward_ids) if reward_ids else {}
        claimed = {
            reward_id: reward_pb2.Reward.FromString(row.body) for reward_id, row in taken.items()
        }
        results: list[Any] = []
        rows: list[RewardRow] = []
        for rewards in requests:
            try:
                _check_reward_targets(rewards, known, step_calls)
                _check_reward_ids(rewards, claimed)
            except (NotFound, InvalidArgument, AlreadyExists) as error:
                results.append(error)
                continue
            results.append(len(rewards))
            for reward in rewards:
                if reward.reward_id:
                    claimed.setdefault(reward.reward_id, reward)
                stored = reward_pb2.Reward()
                stored.CopyFrom(reward)
                if not stored.reward_id:
                    stored.reward_id = new_id()
                if not stored.HasField("create_time"):
                    stored.create_time.FromNanoseconds(int(now * 1e9))
                rows.append(
                    RewardRow(stored.reward_id, stored.session_id, stored.SerializeToString(), now)
                )
        inserted = iter(self.backend.insert_rewards(rows) if rows else [])
        for position, result in enumerate(results):
            if isinstance(result, int):
                written = sum(next(inserted) for _ in range(result))
                results[position] = WriteResult(written, result - written)
        return results

    def closes(self, closes: list[SessionClose]) -> list[Any]:
        sessions = self.backend.get_sessions({close.session_id for close in closes})
        # Outcomes as they will be once earlier closes in this group commit.
        outcomes = {
            s.session_id: s.outcome for s in sessions.values() if s.state == SESSION_STATE_CLOSED
        }
        accepted: list[SessionClose] = []
        results: list[Any] = []
        for close in closes:
            outcome = outcomes.setdefault(close.session_id, close.outcome)
            if outcome != close.outcome:
                results.append(FailedPrecondition(
                    f"session {close.session_id!r} is already closed with outcome {outcome}, not {close.outcome}"
                ))  # fmt: skip
            else:
                results.append(None)
                accepted.append(close)
        closed = iter(self.backend.close_sessions(accepted, time.time()) if accepted else [])
        return [next(closed) if result is None else result for result in results]

    def metadata(self, requests: list[list[MetadataUpdate]]) -> list[Any]:
        known = self.backend.get_sessions(
            {u.session_id for updates in requests for u in updates}
        ).keys()
        accepted: list[MetadataUpdate] = []
        results: list[Any] = []
        for updates in requests:
            missing = sorted({u.session_id for u in updates} - known)
            if missing:
                results.append(NotFound(f"unknown session(s): {', '.join(missing)}"))
            else:
                results.append(updates)
                accepted += updates
        changed = self.backend.update_session_metadata(accepted) if accepted else set()
        return [
            result
            if isinstance(result, Exception)
            else len({u.session_id for u in result} & changed)
            for result in results
        ]

    def delete(self, requests: list[tuple[list[str], float | None, str]]) -> list[Any]:
        """Deletes commit alone: they are rare and touch many rows."""
        ((session_ids, updated_before, end_user_id),) = requests
        try:
            deleted = self.backend.delete_sessions(session_ids, updated_before, end_user_id)
        except (InvalidArgument, NotFound, FailedPrecondition) as error:
            return [error]
        # Deleted sessions may come back under the same id; never splice against a deleted call.
        self._tails = LruCache(self._tails.capacity)
        self.reader.forget()
        return [deleted]

    def _load_tails(self, keys: set[tuple[str, str]]) -> None:
        """Bring trajectories' latest calls into the cache, with one query for all misses
        (after a restart, or once the cache has evicted them)."""
        missing = [key for key in keys if self._tails.get(key) is None]
        if not missing:
            return
        with self.reader.snapshot() as cache:
            rows = self.backend.last_trajectory_calls(missing)
            references = self.reader.references(list(rows.values()), cache)
        for key, call in zip(
            rows, self.reader.render(list(rows.values()), references), strict=True
        ):
            self._tails.put(key, CallTokens.of(call, rows[key].ref_depth))


def _check_reward_ids(
    rewards: Sequence[reward_pb2.Reward], claimed: dict[str, reward_pb2.Reward]
) -> None:
    """A reward id already taken is written again only as a retry, with the same reward."""
    for reward in rewards:
        earlier = claimed.get(reward.reward_id) if reward.reward_id else None
        if earlier is not None and reward_content(earlier) != reward_content(reward):
            raise AlreadyExists(conflict_message(reward.reward_id, earlier, reward))


def _check_reward_targets(
    rewards: Sequence[reward_pb2.Reward], known_sessions: Any, step_calls: dict[str, CallRow]
) -> None:
    """Every reward scores an existing session, and a step reward a call of that session."""
    missing = sorted({r.session_id for r in rewards} - set(known_sessions))
    if missing:
        raise NotFound(f"unknown session(s): {', '.join(missing)}")
    for reward in rewards:
        if reward.WhichOneof("step") != "call_id":
            continue
        row = step_calls.get(reward.call_id)
        if row is None:
            raise NotFound(f"reward {reward.reward_id!r} scores unknown call {reward.call_id!r}")
        if row.session_id != reward.session_id:
            raise InvalidArgument(
                f"reward {reward.reward_id!r}: call {reward.call_id!r} belongs to session "
                f"{row.session_id!r}, not {reward.session_id!r}"
            )

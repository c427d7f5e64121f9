"""An end user's data: list it, find what was trained on it, and delete it on request.

    parity.delete_user_data("user-8812")       # or: parity store delete --user user-8812
    parity store sessions --user user-8812 --tag prod
    parity trainer lineage --user user-8812    # which runs and steps trained on it

Deleting removes the user's sessions with their descendants, calls and rewards (feedback
included), on every store backend, in one transaction. The store's admin role is needed
(PARITY_TOKEN). Deleting a user the store does not know changes nothing and says so.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from parity.api.common.v1 import session_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import RPCError, StoreClient, TrainerClient
from parity.config import current_config
from parity.core.attribution import check_end_user_id, normalize_tags

DEFAULT_TRAINER_ADDRESS = "127.0.0.1:50054"


@dataclass(frozen=True)
class Deletion:
    sessions: int
    calls: int
    rewards: int

    def __str__(self) -> str:
        return f"{self.sessions} sessions, {self.calls} calls and {self.rewards} rewards"


def delete_user_data(end_user_id: str, *, store_address: str | None = None) -> Deletion:
    """Delete every session of `end_user_id` from the token store; raises parity.RPCError
    if the store refuses (an unknown user is not an error: the counts are zero)."""
    if not end_user_id:
        raise ValueError("end_user_id must not be empty")
    check_end_user_id(end_user_id)
    return _delete(store_pb.DeleteSessionsRequest(end_user_id=end_user_id), store_address)


def delete_sessions(
    session_ids: Sequence[str] = (),
    *,
    older_than: timedelta | None = None,
    store_address: str | None = None,
) -> Deletion:
    """Delete sessions by id (with their descendants), and every session idle for longer than `older_than`."""
    request = store_pb.DeleteSessionsRequest(session_ids=list(session_ids))
    if older_than is not None:
        request.updated_before.FromDatetime(datetime.now(UTC) - older_than)
    return _delete(request, store_address)


def user_sessions(
    end_user_id: str = "",
    tags: Sequence[str] = (),
    *,
    limit: int = 1000,
    store_address: str | None = None,
) -> Iterator[session_pb2.Session]:
    """The sessions of an end user and/or carrying every one of `tags`, newest first."""
    client = StoreClient(store_address or current_config().store_address)
    request = store_pb.ListSessionsRequest(
        end_user_id=check_end_user_id(end_user_id), tags=normalize_tags(tags),
        order=store_pb.SESSION_ORDER_NEWEST_FIRST, page_size=min(limit, 1000),
    )  # fmt: skip
    left = limit
    while left > 0:
        page = client.list_sessions(request)
        yield from page.sessions[:left]
        left -= len(page.sessions)
        if not page.next_page_token:
            return
        request.page_token = page.next_page_token


def trained_on(
    end_user_id: str = "",
    session_ids: Sequence[str] = (),
    *,
    trainer_address: str = DEFAULT_TRAINER_ADDRESS,
) -> list[trainer_pb.TrainedSessionsStep]:
    """Every step of the trainer's runs that trained on a sample of `end_user_id` or of
    `session_ids`: the policy that step produced, and the run's later checkpoints and
    exports, learned from that data. The trainer's own record: it answers after deletion."""
    request = trainer_pb.ListTrainedSessionsRequest(
        end_user_id=end_user_id, session_ids=list(session_ids)
    )
    trainer = TrainerClient(trainer_address)
    steps: list[trainer_pb.TrainedSessionsStep] = []
    while True:
        page = trainer.list_trained_sessions(request)
        steps.extend(page.steps)
        if not page.next_page_token:
            return steps
        request.page_token = page.next_page_token


def _delete(request: store_pb.DeleteSessionsRequest, store_address: str | None) -> Deletion:
    response = StoreClient(store_address or current_config().store_address).delete_sessions(request)
    return Deletion(
        response.deleted_session_count, response.deleted_call_count, response.deleted_reward_count
    )


def delete_main(argv: list[str]) -> int:
    """`parity store delete`."""
    parser = argparse.ArgumentParser(
        prog="parity store delete",
        description="delete an end user's data, or sessions by id or age",
    )
    _address_argument(parser)
    parser.add_argument("--user", default="", help="delete every session of this end user")
    parser.add_argument(
        "--session",
        action="append",
        default=[],
        help="delete this session and its descendants (repeatable)",
    )
    parser.add_argument(
        "--older-than-days",
        type=float,
        default=None,
        help="delete sessions idle for longer than this",
    )
    return _run(parser, argv, _print_deletion)


def sessions_main(argv: list[str]) -> int:
    """`parity store sessions`."""
    parser = argparse.ArgumentParser(
        prog="parity store sessions", description="list sessions by end user and tags, newest first"
    )
    _address_argument(parser)
    parser.add_argument("--user", default="", help="only this end user's sessions")
    parser.add_argument(
        "--tag", action="append", default=[], help="only sessions with this tag (repeatable)"
    )
    parser.add_argument("--limit", type=int, default=100)
    return _run(parser, argv, _print_sessions)


def lineage_main(argv: list[str]) -> int:
    """`parity trainer lineage`."""
    parser = argparse.ArgumentParser(
        prog="parity trainer lineage",
        description="which runs and steps of this trainer trained on an end user's sessions",
    )
    parser.add_argument(
        "--address", default=DEFAULT_TRAINER_ADDRESS, help="the trainer's gRPC address"
    )
    parser.add_argument("--user", default="", help="the end user whose sessions to look for")
    parser.add_argument(
        "--session", action="append", default=[], help="a session to look for (repeatable)"
    )
    return _run(parser, argv, _print_lineage)


def _print_lineage(args: argparse.Namespace) -> int:
    if not (args.user or args.session):
        raise ValueError("say whose data to look for: --user or --session")
    steps = trained_on(
        check_end_user_id(args.user, "--user"), args.session, trainer_address=args.address
    )
    whose = f"end user {args.user!r}" if args.user else "these sessions"
    if not steps:
        print(f"no run of the trainer at {args.address} trained on {whose}")
        return 0
    by_run: dict[str, list[trainer_pb.TrainedSessionsStep]] = {}
    for step in steps:
        by_run.setdefault(step.run_id, []).append(step)
    for run_id, run_steps in by_run.items():
        sessions = {session for step in run_steps for session in step.session_ids}
        numbers = ", ".join(str(step.step) for step in run_steps)
        print(
            f"run {run_id}: steps {numbers} trained on {len(sessions)} sessions of {whose}; the policy from step "
            f"{run_steps[0].step} on, with its checkpoints and exports, learned from them"
        )
    return 0


def _address_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--address", default=None, help="the store's gRPC address (default: $PARITY_STORE_ADDRESS)"
    )


def _run(
    parser: argparse.ArgumentParser, argv: list[str], action: Callable[[argparse.Namespace], int]
) -> int:
    args = parser.parse_args(argv)
    try:
        return action(args)
    except ValueError as error:
        parser.error(str(error))
    except RPCError as error:
        address = args.address or current_config().store_address
        print(
            f"{parser.prog}: the service at {address} answered {error.code.name}: {error.message}",
            file=sys.stderr,
        )
        return 1


def _print_deletion(args: argparse.Namespace) -> int:
    if not (args.user or args.session or args.older_than_days is not None):
        raise ValueError("say what to delete: --user, --session or --older-than-days")
    if args.older_than_days is not None and args.older_than_days < 0:
        raise ValueError(f"--older-than-days must not be negative, got {args.older_than_days}")
    request = store_pb.DeleteSessionsRequest(
        session_ids=args.session, end_user_id=check_end_user_id(args.user, "--user")
    )
    if args.older_than_days is not None:
        request.updated_before.FromDatetime(
            datetime.now(UTC) - timedelta(days=args.older_than_days)
        )
    deleted = _delete(request, args.address)
    if args.user and not deleted.sessions:
        print(f"the store holds no sessions of end user {args.user!r}: nothing was deleted")
        return 0
    print(f"deleted {deleted}")
    return 0


def _print_sessions(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {args.limit}")
    for session in user_sessions(args.user, args.tag, limit=args.limit, store_address=args.address):
        created = session.create_time.ToDatetime(UTC).isoformat(timespec="seconds")
        state = session_pb2.SessionState.Name(session.state).removeprefix("SESSION_STATE_").lower()
        tags = ",".join(session.tags) or "-"
        print(
            f"{session.session_id}\t{created}\t{state}\t{session.call_count} calls\t{session.end_user_id or '-'}\t{tags}"
        )
    return 0

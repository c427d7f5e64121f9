"""Serving a trained policy to users: the gate, the verified push, and rollback.

    parity trainer promote RUN_ID --margin 0.02     # gate the run's latest checkpoint; serve it if it passes
    parity trainer promote RUN_ID --canary-share 0.1  # first to a tenth of sessions, from the trainer's replicas
    parity trainer promote RUN_ID --served-model assistant-acme  # only to the users whose agents ask for that name
    parity trainer rollback                         # end the canary, or serve again what the last promotion replaced
    parity trainer promotions                       # every decision, newest first

    promotion = parity.promote("run-...", margin=0.02)
    if not promotion.promoted: print(promotion.reason)

The trainer must run with serving replicas (`--serving-replicas`, `--serving-ingest-address`):
its own replicas take every update of a run, the serving ones only what passes the gate.
The gate compares the run's validation at the checkpoint's step with its validation at
step 0 on one metric (pass@1 by default), so the run needs validation tasks.

A LoRA run's adapter can be promoted for one tenant: under a model name of its own
(`served_model`), it reaches only the users whose agents ask for that name, and each name
is promoted and rolled back on its own (docs/production.md, "Several tenants").
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from parity.api.trainer.v1 import promotion_pb2
from parity.api.trainer.v1 import trainer_service_pb2 as trainer_pb
from parity.clients import RPCError, TrainerClient

DEFAULT_TRAINER_ADDRESS = "127.0.0.1:50054"


@dataclass(frozen=True)
class Promotion:
    promotion_id: str
    outcome: str
    """promoted, canary, refused or rolled_back."""
    run_id: str
    checkpoint_id: str
    policy_version: int
    """The version users' calls are stamped with from now on; 0 for a refusal."""
    metric: str
    baseline: float
    candidate: float
    margin: float
    reason: str
    create_time: datetime
    canary_share: float = 0.0
    served_model: str = ""
    """The model name whose users the decision concerns; empty: every user."""

    @property
    def promoted(self) -> bool:
        return self.outcome == "promoted"

    @classmethod
    def from_proto(cls, message: promotion_pb2.Promotion) -> Promotion:
        outcome = (
            promotion_pb2.PromotionOutcome.Name(message.outcome)
            .removeprefix("PROMOTION_OUTCOME_")
            .lower()
        )
        return cls(
            message.promotion_id, outcome, message.run_id, message.checkpoint_id, message.policy_version, message.metric,
            message.baseline, message.candidate, message.margin, message.reason, message.create_time.ToDatetime(UTC),
            message.canary_share, message.served_model,
        )  # fmt: skip

    def __str__(self) -> str:
        what = f"checkpoint {self.checkpoint_id}" if self.checkpoint_id else "the start model"
        users = f"users of {self.served_model}" if self.served_model else "users"
        if self.outcome == "rolled_back":
            return f"{self.promotion_id}: rolled back; {self.reason}; {users} get policy version {self.policy_version}"
        gate = f"{self.metric} {self.candidate:.4g} against the serving model's {self.baseline:.4g} (margin {self.margin:g})"
        if self.outcome == "refused" and math.isnan(self.candidate + self.baseline):
            gate = f"{self.metric}"
        if self.promoted:
            return f"{self.promotion_id}: promoted {what}: {gate}; {users} get policy version {self.policy_version}"
        if self.outcome == "canary":
            return (f"{self.promotion_id}: canary of {what}: {gate}; {self.canary_share:.0%} of sessions get policy version "
                    f"{self.policy_version} from the trainer's replicas")  # fmt: skip
        return f"{self.promotion_id}: refused {what} ({gate}): {self.reason}"


def promote(
    run_id: str, *, checkpoint_id: str = "", metric: str = "pass@1", margin: float = 0.0, canary_share: float = 0.0,
    served_model: str = "", trainer_address: str = DEFAULT_TRAINER_ADDRESS,
) -> Promotion:  # fmt: skip
    """Gate the run's checkpoint (its latest by default) and, if it passes, serve it to users (with `canary_share`:
    first to that share of sessions, from the trainer's own replicas; with `served_model`, a LoRA run's adapter under
    that name, to the users whose agents ask for it). A refusal is an answer, not an error: `promoted` is False and
    `reason` says why. Raises parity.RPCError when the trainer cannot decide."""
    request = trainer_pb.PromotePolicyRequest(run_id=run_id, checkpoint_id=checkpoint_id, metric=metric, margin=margin,
                                              canary_share=canary_share, served_model=served_model)  # fmt: skip
    return Promotion.from_proto(TrainerClient(trainer_address).promote_policy(request).promotion)


def rollback(
    *, served_model: str = "", trainer_address: str = DEFAULT_TRAINER_ADDRESS
) -> Promotion:
    """Serve again what the last standing promotion (under `served_model`) replaced."""
    request = trainer_pb.RollbackPolicyRequest(served_model=served_model)
    return Promotion.from_proto(TrainerClient(trainer_address).rollback_policy(request).promotion)


def promotions(*, trainer_address: str = DEFAULT_TRAINER_ADDRESS) -> list[Promotion]:
    """Every promotion, refusal and rollback, newest first."""
    client = TrainerClient(trainer_address)
    request = trainer_pb.ListPromotionsRequest(page_size=1000)
    found: list[Promotion] = []
    while True:
        page = client.list_promotions(request)
        found.extend(Promotion.from_proto(p) for p in page.promotions)
        if not page.next_page_token:
            return found
        request.page_token = page.next_page_token


def promote_main(argv: list[str]) -> int:
    """`parity trainer promote`: exits 0 when promoted (or its canary started), 3 when the gate refused."""
    parser = _parser(
        "promote",
        "gate a run's checkpoint against the serving model; serve it to users if it passes",
    )
    parser.add_argument("run_id", help="the run whose checkpoint is the candidate")
    parser.add_argument(
        "--checkpoint", default="", help="the candidate checkpoint's id; default: the run's latest"
    )
    parser.add_argument(
        "--metric", default="pass@1", help="the validation metric the gate compares"
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=0.0,
        help="how far the candidate's value may be below the run's step-0 validation (the model it started from, "
        "which the trainer checks is what serves)",
    )
    parser.add_argument("--canary-share", type=float, default=0.0,
                        help="first serve the candidate to this share of sessions (0..1) from the trainer's replicas")  # fmt: skip
    parser.add_argument("--served-model", default="",
                        help="serve a LoRA run's adapter under this model name, only to the users whose agents ask for it")  # fmt: skip

    def act(args: argparse.Namespace) -> int:
        promotion = promote(args.run_id, checkpoint_id=args.checkpoint, metric=args.metric, margin=args.margin,
                            canary_share=args.canary_share, served_model=args.served_model,
                            trainer_address=args.address)  # fmt: skip
        print(promotion)
        return 3 if promotion.outcome == "refused" else 0

    return _run(parser, argv, act)


def rollback_main(argv: list[str]) -> int:
    """`parity trainer rollback`."""
    parser = _parser("rollback", "serve again the policy the last promotion replaced")
    parser.add_argument("--served-model", default="",
                        help="take back the last promotion under this model name (one tenant's) instead")  # fmt: skip

    def act(args: argparse.Namespace) -> int:
        print(rollback(served_model=args.served_model, trainer_address=args.address))
        return 0

    return _run(parser, argv, act)


def promotions_main(argv: list[str]) -> int:
    """`parity trainer promotions`."""
    parser = _parser("promotions", "every promotion, refusal and rollback, newest first")

    def act(args: argparse.Namespace) -> int:
        listed = promotions(trainer_address=args.address)
        if not listed:
            print(f"the trainer at {args.address} has promoted nothing")
        for promotion in listed:
            print(f"{promotion.create_time.isoformat(timespec='seconds')}\t{promotion}")
        return 0

    return _run(parser, argv, act)


def _parser(action: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"parity trainer {action}", description=description)
    parser.add_argument(
        "--address", default=DEFAULT_TRAINER_ADDRESS, help="the trainer's gRPC address"
    )
    return parser


def _run(
    parser: argparse.ArgumentParser, argv: list[str], action: Callable[[argparse.Namespace], int]
) -> int:
    args = parser.parse_args(argv)
    try:
        return action(args)
    except RPCError as error:
        print(
            f"{parser.prog}: the trainer at {args.address} answered {error.code.name}: {error.message}",
            file=sys.stderr,
        )
        return 1

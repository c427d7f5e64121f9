"""A canary: a share of sessions served by a candidate's replicas, their calls stamped with its version.

The trainer sets one on the serving ingests (SetCanary) before it promotes a candidate
into the serving replicas, so feedback on the candidate's sessions can be compared with
the rest by policy version. A session is in the canary when a hash of its id falls
below the share: every call of a session stays on one side, and raising the share keeps
the sessions already in. A session in the canary whose replicas are all unhealthy is
served by the serving replicas at the serving version, never refused. The canary lives
in memory: an ingest that restarts serves every session from its own replicas until
the trainer sets it again.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from parity.services.ingest.upstream.replica_router import Replica, ReplicaRouter
from parity.services.runtime.errors import InvalidArgument

_HASH_SPACE = float(1 << 64)


def in_canary(session_id: str, share: float) -> bool:
    """Whether a canary of `share` serves this session: a fixed point in [0, 1) per session, below the share."""
    digest = hashlib.blake2b(f"canary\x00{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _HASH_SPACE < share


@dataclass(frozen=True)
class Canary:
    router: ReplicaRouter
    share: float
    policy_version: int

    def takes(self, session_id: str) -> bool:
        return in_canary(session_id, self.share)

    @property
    def upstreams(self) -> list[str]:
        return [replica.base_url for replica in self.router.replicas]


class CanaryRoute:
    """The canary now, if any; swapped whole, so a request sees one canary or none."""

    def __init__(self, health_interval_s: float, api_key: str = "") -> None:
        self.current: Canary | None = None
        self._health_interval_s = health_interval_s
        self._api_key = api_key

    def pick(self, session_id: str, model: str) -> tuple[list[Replica], int] | None:
        """The canary's healthy replicas serving `model` for this session, and the version to stamp; None when the
        session is not in the canary or none of its replicas can serve it."""
        canary = self.current
        if canary is None or not canary.takes(session_id):
            return None
        healthy = [
            replica for replica in canary.router.candidates(model, session_id) if replica.healthy
        ]
        return (healthy, canary.policy_version) if healthy else None

    async def set(
        self, upstreams: list[str], share: float, policy_version: int, current_version: int
    ) -> None:
        if not math.isfinite(share) or not 0 <= share <= 1:
            raise InvalidArgument(f"share must be between 0 and 1, got {share}")
        previous = self.current
        if share == 0:
            self.current = None
        else:
            urls = [url.strip().rstrip("/") for url in upstreams if url.strip()]
            if not urls:
                raise InvalidArgument("upstreams is required: the replicas that serve the canary")
            if bad := [url for url in urls if not url.startswith(("http://", "https://"))]:
                raise InvalidArgument(f"upstreams must be http(s) URLs, got {', '.join(bad)}")
            if policy_version <= current_version:
                raise InvalidArgument(
                    f"policy_version {policy_version} must be above the current {current_version}"
                )
            router = ReplicaRouter(urls, self._health_interval_s, self._api_key)
            await router.start()
            self.current = Canary(router, share, policy_version)
        if previous is not None:
            await previous.router.stop()

    async def close(self) -> None:
        if self.current is not None:
            await self.current.router.stop()
            self.current = None

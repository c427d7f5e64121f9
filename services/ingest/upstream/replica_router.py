"""Which vLLM replica serves a request: sticky per session, healthy only.

Rendezvous hashing maps a session to the same replica every time (so vLLM's prefix
cache holds its conversation), and moves only that replica's sessions elsewhere
when it fails a health check. Replicas announce their models through /v1/models,
which is also the health check.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field

import aiohttp
import structlog

log = structlog.get_logger(__name__)

UNHEALTHY_AFTER_FAILED_CHECKS = 2


@dataclass
class Replica:
    base_url: str
    models: set[str] = field(default_factory=set)
    # The model it serves (not a LoRA adapter it lists beside it), and each model's context length.
    base_model: str | None = None
    max_model_len: dict[str, int] = field(default_factory=dict)
    healthy: bool = False
    in_flight: int = 0
    request_count: int = 0
    error_count: int = 0
    last_check: float = 0.0
    failed_checks: int = 0

    @property
    def name(self) -> str:
        return self.base_url.split("://", 1)[-1].rstrip("/")


def _score(session_id: str, replica: Replica) -> int:
    digest = hashlib.blake2b(f"{session_id}\x00{replica.name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class ReplicaRouter:
    def __init__(
        self, base_urls: list[str], health_interval_s: float = 2.0, api_key: str = ""
    ) -> None:
        self.replicas = [Replica(url.rstrip("/")) for url in base_urls]
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.health_interval_s = health_interval_s
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    def models(self) -> set[str]:
        return {model for replica in self.replicas for model in replica.models}

    def candidates(self, model: str, session_id: str) -> list[Replica]:
        """Replicas serving `model`, the session's own first, then its fallbacks. Only the
        healthy ones; if none is, all of them: a try beats refusing outright."""
        serving = [r for r in self.replicas if model in r.models]
        pool = [r for r in serving if r.healthy] or serving
        if len(pool) < 2:
            return pool
        return sorted(pool, key=lambda r: _score(session_id, r), reverse=True)

    def policy_model(self) -> str | None:
        """The model the replicas serve, for requests that name none of theirs (`@policy` aliases)."""
        return next((r.base_model for r in self.replicas if r.healthy and r.base_model), None)

    def max_model_len(self, model: str) -> int | None:
        return next(
            (r.max_model_len[model] for r in self.replicas if model in r.max_model_len), None
        )

    def knows(self, model: str) -> bool:
        return any(model in r.models for r in self.replicas)

    def starting(self) -> int:
        """Replicas that have never answered a health check, so their models are not known yet."""
        return sum(1 for r in self.replicas if not r.models)

    def mark_failed(self, replica: Replica, reason: str) -> None:
        if replica.healthy:
            log.warning("replica_unhealthy", replica=replica.name, reason=reason)
        replica.healthy = False

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=5), headers=self._headers
        )
        await self.check_all()
        self._task = asyncio.create_task(self._check_forever(), name="replica-health")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def check_all(self) -> None:
        await asyncio.gather(*(self._check(replica) for replica in self.replicas))

    async def _check_forever(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            await self.check_all()

    async def _check(self, replica: Replica) -> None:
        assert self._session is not None
        try:
            async with self._session.get(f"{replica.base_url}/v1/models") as response:
                response.raise_for_status()
                listing = await response.json()
            entries = listing.get("data", [])
            replica.models = {entry["id"] for entry in entries}
            replica.base_model = next((e["id"] for e in entries if not e.get("parent")), None)
            replica.max_model_len = {
                e["id"]: e["max_model_len"]
                for e in entries
                if isinstance(e.get("max_model_len"), int)
            }
            if not replica.healthy:
                log.info("replica_healthy", replica=replica.name, models=sorted(replica.models))
            replica.healthy, replica.failed_checks = True, 0
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as error:
            replica.failed_checks += 1
            # One slow answer on a loaded machine is not a dead replica; two in a row is.
            if replica.failed_checks >= UNHEALTHY_AFTER_FAILED_CHECKS or not replica.models:
                self.mark_failed(replica, f"health check failed: {error!r}")
        replica.last_check = time.time()

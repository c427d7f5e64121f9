"""Forwarding to vLLM replicas: keep-alive connections, retries with backoff, failover.

Connection errors and 5xx answers are retried, with exponential backoff, moving to
the session's next replica; a connection error also marks the replica unhealthy
until its next health check passes. 4xx answers are the agent's to see, unchanged.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import structlog

from parity.services.ingest import openai_errors
from parity.services.ingest.upstream.http_pool import (
    UpstreamConnectionError,
    UpstreamConnectTimeout,
    UpstreamPool,
    UpstreamResponse,
)
from parity.services.ingest.upstream.replica_router import Replica, ReplicaRouter

log = structlog.get_logger(__name__)


@dataclass
class UpstreamReply:
    replica: Replica
    response: UpstreamResponse
    attempts: int
    first_byte_at: float
    _released: bool = False

    def release(self) -> None:
        """Hand the connection back once the answer is read (or abandoned); idempotent."""
        if not self._released:
            self._released = True
            self.replica.in_flight -= 1
            self.response.release()


class UpstreamFailed(openai_errors.HttpError):
    """No replica gave an answer to relay: the 502 or 504 the agent gets, with the
    replica tried last and how many attempts were made, for the call's record."""

    def __init__(self, error: openai_errors.HttpError, replica: Replica, attempts: int) -> None:
        super().__init__(error.status, error.message, error.error_type)
        self.replica = replica
        self.attempts = attempts


class UpstreamClient:
    def __init__(
        self,
        router: ReplicaRouter,
        *,
        retries: int = 2,
        backoff_s: float = 0.05,
        timeout_s: float = 600.0,
        api_key: str = "",
    ) -> None:
        self.router = router
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        # No total limit: a long generation streams for minutes. A stall between
        # bytes, or a replica that never accepts, is what times out.
        self._pool = UpstreamPool(connect_timeout_s=5.0, read_timeout_s=timeout_s, api_key=api_key)

    async def stop(self) -> None:
        await self._pool.close()

    async def ask(self, candidates: list[Replica], path: str, body: bytes) -> tuple[int, bytes]:
        """A request that is no call to capture (a render, a probe, token counting): its status and whole body."""
        reply = await self.post(candidates, path, body)
        try:
            return reply.response.status, await reply.response.read()
        except (UpstreamConnectionError, TimeoutError) as error:
            raise openai_errors.bad_gateway(
                f"upstream {reply.replica.name} failed while answering: {error!r}"
            ) from None
        finally:
            reply.release()

    async def post(self, candidates: list[Replica], path: str, body: bytes) -> UpstreamReply:
        """POST to the first replica that answers without a connection error or 5xx.
        The caller reads `response`, then calls `release()` on the reply."""
        if not candidates:
            raise openai_errors.unavailable(
                "no replica serves the requested model now; retry shortly"
            )
        last_error, replica = "no attempt made", candidates[0]
        for attempt in range(self.retries + 1):
            replica = candidates[attempt % len(candidates)]
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            replica.request_count += 1
            try:
                response = await self._post(replica, path, body)
            except UpstreamConnectTimeout as error:
                # A replica that never accepts is a failed one: move on, as on a refused connection.
                replica.error_count += 1
                self.router.mark_failed(replica, f"connect timed out: {error!r}")
                last_error = f"{replica.name}: {error}"
                continue
            except TimeoutError:
                # A slow generation is not a failed replica, and retrying it would only double the wait.
                replica.error_count += 1
                timeout = openai_errors.gateway_timeout(
                    f"upstream {replica.name} did not answer within {self.timeout_s:g} s"
                )
                raise UpstreamFailed(timeout, replica, attempt + 1) from None
            except UpstreamConnectionError as error:
                replica.error_count += 1
                self.router.mark_failed(replica, f"connection error: {error}")
                last_error = f"{replica.name}: {error}"
                continue
            if response.status >= 500:
                replica.error_count += 1
                try:
                    detail = (await response.read())[:300].decode(errors="replace")
                except (UpstreamConnectionError, TimeoutError) as error:
                    detail = f"(body unreadable: {error!r})"
                finally:
                    replica.in_flight -= 1
                    response.release()
                last_error = f"{replica.name} answered {response.status}: {detail}"
                log.warning(
                    "upstream_5xx",
                    replica=replica.name,
                    status=response.status,
                    attempt=attempt + 1,
                )
                continue
            return UpstreamReply(replica, response, attempt + 1, time.time())
        failed = openai_errors.bad_gateway(
            f"upstream failed after {self.retries + 1} attempts; last: {last_error}"
        )
        raise UpstreamFailed(failed, replica, self.retries + 1)

    async def _post(self, replica: Replica, path: str, body: bytes) -> UpstreamResponse:
        """In flight from here until the reply is released: vLLM sends a whole answer's
        headers only once it is generated."""
        replica.in_flight += 1
        try:
            return await self._pool.post(replica.base_url, path, body)
        except BaseException:
            replica.in_flight -= 1
            raise

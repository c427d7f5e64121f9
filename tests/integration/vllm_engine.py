"""Making vLLM's timing explicit: its scheduler frozen on request, and its own request gauges."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from parity.services.inference.vllm_launcher import VllmServer


@contextmanager
def engine_frozen(server: VllmServer) -> Iterator[None]:
    """vLLM's scheduler paused with its development route (`/pause?mode=keep`): requests are accepted and wait,
    and none generates a token until `/resume`. A test decides when an answer can come instead of racing it."""
    httpx.post(f"{server.base_url}/pause", params={"mode": "keep"}, timeout=30).raise_for_status()
    try:
        yield
    finally:
        httpx.post(f"{server.base_url}/resume", timeout=30).raise_for_status()


@dataclass(frozen=True)
class EngineRequests:
    waiting: int
    running: int
    generated_tokens: int


def engine_requests(server: VllmServer) -> EngineRequests:
    """What vLLM's /metrics says of its requests: waiting and running (as of its last scheduler step), and the tokens
    it has generated since it started."""
    families = {family.name: family for family in text_string_to_metric_families(
        httpx.get(f"{server.base_url}/metrics", timeout=30).text
    )}  # fmt: skip

    def total(name: str, **labels: str) -> int:
        return int(sum(sample.value for sample in families[name].samples
                       if sample.name in (name, f"{name}_total") and labels.items() <= sample.labels.items()))  # fmt: skip

    return EngineRequests(
        waiting=total("vllm:num_requests_waiting"),
        running=total("vllm:num_requests_running"),
        generated_tokens=total("vllm:generation_tokens"),
    )

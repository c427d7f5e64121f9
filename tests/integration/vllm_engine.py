"""Making vLLM's timing explicit: its scheduler frozen on request, and its own count of generated tokens."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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


def generated_tokens(server: VllmServer) -> int:
    """The tokens vLLM has generated since it started (its /metrics `vllm:generation_tokens`, summed over engines)."""
    families = text_string_to_metric_families(
        httpx.get(f"{server.base_url}/metrics", timeout=30).text
    )
    return int(sum(sample.value for family in families if family.name == "vllm:generation_tokens"
                   for sample in family.samples if sample.name == "vllm:generation_tokens_total"))  # fmt: skip

"""Where the trainer's peers are: the assembler, the vLLM replicas and the ingests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class TrainerDeployment:
    """Where the trainer's peers are; fixed for the life of the service."""

    assembler_address: str
    replica_urls: tuple[str, ...]
    work_dir: Path
    """Weights pushed to replicas are written under work_dir/weights."""
    ingest_addresses: tuple[str, ...] = ()
    """Every ingest replica: all are paused, versioned and resumed together around each sync."""
    serving_replica_urls: tuple[str, ...] = ()
    """The replicas users are served by; only a gated promotion changes them. Empty: runs update the only replicas there are."""
    serving_ingest_addresses: tuple[str, ...] = ()
    """The ingests in front of the serving replicas, paused and versioned around a promotion."""
    consumer_id: str = "trainer"
    sync_tolerance: float = 0.0
    """Largest probe difference a verified replica may show; 0 derives it from the dtypes on both sides."""
    max_message_bytes: int = 64 << 20
    replica_api_key: str = field(default="", repr=False)
    """vLLM's VLLM_API_KEY, sent to every replica."""

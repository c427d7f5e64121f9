"""How `parity trainer serve` runs the TrainerService."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from parity.api.trainer.v1 import trainer_service_pb2, trainer_service_pb2_grpc
from parity.core.settings_fields import setting
from parity.services.runtime.addresses import parse_address_list
from parity.services.runtime.auth import read_secret
from parity.services.runtime.config import ServerConfig
from parity.services.runtime.errors import InvalidArgument
from parity.services.runtime.server import ServiceBinding
from parity.services.runtime.service_definition import ServiceDefinition
from parity.services.trainer.peers import IngestFleet, TrainerDeployment
from parity.services.trainer.servicer import TrainerServicer
from parity.services.trainer.training_runs import TrainingRuns

FULL_NAME = trainer_service_pb2.DESCRIPTOR.services_by_name["TrainerService"].full_name
DEFAULT_PORT = 50054


@dataclass
class TrainerConfig(ServerConfig):
    port: int = setting(DEFAULT_PORT, "gRPC port; 0 picks a free one")
    assembler_address: str = setting(
        "127.0.0.1:50053", "the assembler's gRPC address (StreamBatches)"
    )
    ingest_address: str = setting(
        "", "ingest's gRPC address, paused and versioned around each sync; several ingest replicas: "
        "comma-separated, all paused, versioned and resumed together; dns:///NAME:PORT: every address NAME resolves "
        "to at each sync (a Kubernetes headless Service); empty: none"
    )  # fmt: skip
    replicas: str = setting(
        "", "comma-separated vLLM server URLs (http://host:port) that receive every update"
    )
    replica_api_key_file: str = setting(
        "",
        "file holding the replicas' API key (vLLM's VLLM_API_KEY), sent to them as a bearer token; empty: none",
    )
    serving_replicas: str = setting(
        "", "comma-separated vLLM server URLs that serve users: only a promotion that passes its gate loads a policy "
        "into them (parity trainer promote); empty: none, and runs update --replicas as the only replicas"
    )  # fmt: skip
    serving_ingest_address: str = setting(
        "", "the gRPC addresses of the ingests in front of --serving-replicas, comma-separated (or dns:///NAME:PORT), "
        "paused and versioned around a promotion"
    )  # fmt: skip
    work_dir: str = setting(
        ".parity/trainer", "where pushed weights (and, by default, checkpoints) are written"
    )
    consumer_id: str = setting(
        "trainer", "durable StreamBatches consumer name; unacknowledged batches come back to it"
    )
    max_concurrent_runs: int = setting(
        1, "LoRA runs on one base model trained at once, each an adapter on one shared copy of the base and served "
        "under a model name of its own (the replicas need --max-loras at least this); 1: one run at a time"
    )  # fmt: skip
    resume_runs: bool = setting(
        True, "on start, resume each run this trainer was training when it stopped (shut down or killed) from its "
        "latest checkpoint, before answering; one that cannot resume is marked failed with the reason"
    )  # fmt: skip
    sync_tolerance: float = setting(
        0.0,
        "largest logprob difference on the probe a verified replica may show; "
        "0 derives it from the dtypes the run and each replica compute in (1e-3 for float32 on both sides)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.assembler_address or not self.consumer_id:
            raise InvalidArgument("assembler_address and consumer_id are required")
        if self.max_concurrent_runs < 1:
            raise InvalidArgument(
                f"max_concurrent_runs must be at least 1, got {self.max_concurrent_runs}"
            )
        if self.sync_tolerance < 0:
            raise InvalidArgument("sync_tolerance must be >= 0 (0 derives it from the dtypes)")
        for name, addresses in (
            ("ingest_address", self.ingest_addresses),
            ("serving_ingest_address", self.serving_ingest_addresses),
        ):
            try:
                IngestFleet(addresses)
            except ValueError as error:
                raise InvalidArgument(f"{name}: {error}") from None
        if self.serving_ingest_address and not self.serving_replicas:
            raise InvalidArgument(
                "serving_ingest_address needs serving_replicas: the replicas those ingests serve from"
            )
        shared = set(_urls(self.replicas)) & set(_urls(self.serving_replicas))
        if shared:
            raise InvalidArgument(
                f"serving_replicas must not be among replicas, which every update reaches: {', '.join(sorted(shared))}"
            )

    @property
    def ingest_addresses(self) -> tuple[str, ...]:
        return tuple(parse_address_list(self.ingest_address))

    @property
    def serving_ingest_addresses(self) -> tuple[str, ...]:
        return tuple(parse_address_list(self.serving_ingest_address))

    def deployment(self) -> TrainerDeployment:
        return TrainerDeployment(
            assembler_address=self.assembler_address,
            replica_urls=_urls(self.replicas),
            serving_replica_urls=_urls(self.serving_replicas),
            serving_ingest_addresses=self.serving_ingest_addresses,
            work_dir=Path(self.work_dir),
            ingest_addresses=self.ingest_addresses,
            consumer_id=self.consumer_id,
            sync_tolerance=self.sync_tolerance,
            max_concurrent_runs=self.max_concurrent_runs,
            max_message_bytes=self.max_message_bytes,
            replica_api_key=read_secret(self.replica_api_key_file, "replica_api_key_file"),
        )


def _urls(text: str) -> tuple[str, ...]:
    return tuple(url.strip().rstrip("/") for url in text.split(",") if url.strip())


def build_bindings(config: TrainerConfig) -> list[ServiceBinding]:
    runs = TrainingRuns(config.deployment())

    async def start() -> None:
        if config.resume_runs:
            await asyncio.to_thread(runs.resume_interrupted)

    async def stop() -> None:
        runs.close()

    def add(server: object) -> None:
        trainer_service_pb2_grpc.add_TrainerServiceServicer_to_server(TrainerServicer(runs), server)

    return [ServiceBinding(FULL_NAME, add, on_start=start, on_stop=stop)]


DEFINITION = ServiceDefinition(
    name="trainer",
    description="Serve the verl trainer (runs, metrics, weight sync).",
    config_cls=TrainerConfig,
    build_bindings=build_bindings,
)

"""A real store and a real ingest in front of the session's real vLLM, for any test module."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest

from parity.api.common.v1 import llm_call_pb2
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.api.store.v1 import store_service_pb2_grpc as store_grpc
from parity.services.inference.vllm_launcher import VllmServer
from tests.conftest import free_port
from tests.integration.service_fixtures import RunningService, ServiceLauncher
from tests.waiting import eventually


@dataclass
class IngestStack:
    store: RunningService
    ingest: RunningService
    http_port: int
    spool_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/v1"

    def session_url(self, slug: str) -> str:
        return f"http://127.0.0.1:{self.http_port}/sessions/{slug}/v1"

    def calls(self, session_id: str) -> list[llm_call_pb2.LlmCall]:
        with grpc.insecure_channel(self.store.address) as channel:
            stub = store_grpc.TokenStoreServiceStub(channel)
            return list(
                stub.ListCalls(
                    store_pb.ListCallsRequest(session_id=session_id, view=store_pb.CALL_VIEW_FULL)
                ).calls
            )

    def stored_calls(self, session_id: str) -> list[llm_call_pb2.LlmCall]:
        """The session's calls; none while it has none (a session exists once its first call is stored)."""
        try:
            return self.calls(session_id)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.NOT_FOUND, error
            return []

    def wait_for_calls(
        self, session_id: str, count: int, timeout: float = 30
    ) -> list[llm_call_pb2.LlmCall]:
        """The session's calls once it has `count` of them."""

        def enough() -> list[llm_call_pb2.LlmCall] | None:
            calls = self.stored_calls(session_id)
            return calls if len(calls) >= count else None

        return eventually(enough, timeout_s=timeout, interval_s=0.2,
                          what=f"{count} calls stored for session {session_id!r}")  # fmt: skip

    def calls_after_flush(self, session_id: str) -> list[llm_call_pb2.LlmCall]:
        """The session's calls once ingest has stored every call it captured so far: for asserting what an answer
        already received did, or did not, record."""
        flushed = httpx.post(f"http://127.0.0.1:{self.http_port}/parity/v1/flush", timeout=60)
        assert flushed.status_code == 200, flushed.text
        return self.stored_calls(session_id)


def start_ingest(
    launcher: ServiceLauncher,
    store_address: str,
    upstream: str,
    spool_path: Path,
    *extra: str,
    port: int | None = None,
    http_port: int | None = None,
) -> tuple[RunningService, int]:
    http_port = http_port or free_port()
    ingest = launcher.start(
        "ingest", "--http-port", str(http_port), "--upstreams", upstream, "--store", store_address,
        "--spool-path", str(spool_path), "--health-interval-s", "0.5", *extra, port=port,
    )  # fmt: skip
    return ingest, http_port


@pytest.fixture(scope="module")
def ingest_stack(
    module_services: ServiceLauncher, vllm_server, tmp_path_factory
) -> Iterator[IngestStack]:
    data = tmp_path_factory.mktemp("ingest")
    store = module_services.start("store", "--url", f"sqlite:///{data}/store.db")
    ingest, http_port = start_ingest(
        module_services, store.address, vllm_server.base_url, data / "spool.db"
    )
    yield IngestStack(store, ingest, http_port, data / "spool.db")


@dataclass
class FullStack(IngestStack):
    assembler: RunningService


@pytest.fixture(scope="module")
def full_stack(
    module_services: ServiceLauncher, vllm_server, tmp_path_factory
) -> Iterator[FullStack]:
    """Store, assembler and ingest in front of the real vLLM, with the SDK pointed at them."""
    import parity

    data = tmp_path_factory.mktemp("full-stack")
    store = module_services.start("store", "--url", f"sqlite:///{data}/store.db")
    assembler = module_services.start(
        "assembler", "--store-address", store.address, "--group-idle-s", "5"
    )
    ingest, http_port = start_ingest(
        module_services, store.address, vllm_server.base_url, data / "spool.db"
    )
    previous = parity.current_config()
    parity.configure(ingest_url=f"http://127.0.0.1:{http_port}", assembler_address=assembler.address,
                     store_address=store.address)  # fmt: skip
    yield FullStack(store, ingest, http_port, data / "spool.db", assembler)
    parity.configure(
        **{k: getattr(previous, k) for k in ("ingest_url", "assembler_address", "store_address")}
    )


@dataclass
class TrainingStack:
    """Every service of a deployment around a vLLM of its own, as `parity train --stack` reaches one."""

    vllm: VllmServer
    store: RunningService
    assembler: RunningService
    ingest: RunningService
    trainer: RunningService
    http_port: int

    @property
    def addresses(self):
        from parity.training import StackAddresses

        return StackAddresses(f"http://127.0.0.1:{self.http_port}", self.assembler.address, self.trainer.address,
                              self.store.address)  # fmt: skip


def start_training_stack(
    launcher: ServiceLauncher, vllm: VllmServer, data: Path, *trainer_args: str
) -> TrainingStack:
    store = launcher.start(
        "store", "--url", f"sqlite:///{data}/store.db", "--shutdown-grace-s", "0.5"
    )
    assembler = launcher.start("assembler", "--store-address", store.address, "--group-idle-s", "5",
                               "--shutdown-grace-s", "0.5")  # fmt: skip
    ingest, http_port = start_ingest(launcher, store.address, vllm.base_url, data / "spool.db")
    trainer = launcher.start(
        "trainer", "--assembler-address", assembler.address, "--ingest-address", ingest.address,
        "--replicas", vllm.base_url, "--work-dir", str(data / "trainer"), "--shutdown-grace-s", "1", *trainer_args,
    )  # fmt: skip
    return TrainingStack(vllm, store, assembler, ingest, trainer, http_port)


def own_training_stack(
    tmp_path_factory: pytest.TempPathFactory, vllm: VllmServer
) -> Iterator[TrainingStack]:
    """A deployed stack with a launcher of its own, for a package whose modules share one stack: a fixture of
    package scope cannot use the module's launcher."""
    launcher = ServiceLauncher(tmp_path_factory.mktemp("services"))
    try:
        yield start_training_stack(launcher, vllm, tmp_path_factory.mktemp("deployed-stack"))
    finally:
        launcher.stop_all()


@pytest.fixture(scope="module")
def deployed_stack(
    module_services: ServiceLauncher, training_vllm, tmp_path_factory
) -> TrainingStack:
    return start_training_stack(
        module_services, training_vllm, tmp_path_factory.mktemp("deployed-stack")
    )

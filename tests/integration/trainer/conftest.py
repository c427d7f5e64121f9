"""A whole training stack around the training vLLM (`training_vllm`, or a module's own where it serves the model
otherwise): training rewrites the served weights, so the session's `vllm_server` is left alone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from parity.services.inference.vllm_launcher import VllmLaunchConfig, VllmServer
from tests.conftest import free_port
from tests.integration.service_fixtures import RunningService, ServiceLauncher
from tests.integration.stack_fixtures import start_ingest
from tests.integration.vllm_fixtures import VLLM_STARTUP_TIMEOUT_S, inference_python


@dataclass
class TrainingStack:
    vllm: VllmServer
    store: RunningService
    assembler: RunningService
    ingest: RunningService
    trainer: RunningService
    http_port: int


@contextmanager
def serving(
    model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    dtype: str = "float32",
    lora_rank: int = 0,
    max_loras: int = 1,
) -> Iterator[VllmServer]:
    """A vLLM of its own serving `model_dir` as "tiny", in `dtype`, and adapters up to `lora_rank`."""
    config = VllmLaunchConfig(
        model_path=model_dir, port=free_port(), python=inference_python(), served_model_name="tiny", dtype=dtype,
        log_path=tmp_path_factory.mktemp("trainer-vllm") / "vllm.log", startup_timeout_s=VLLM_STARTUP_TIMEOUT_S,
        lora_rank=lora_rank, max_loras=max_loras,
    )  # fmt: skip
    with VllmServer(config) as server:
        yield server


@pytest.fixture(scope="module")
def trainer_vllm(training_vllm) -> VllmServer:
    """The training stack's vLLM: the session's shared one, unless a module serves the model otherwise."""
    return training_vllm


@pytest.fixture(scope="module")
def training_stack(
    module_services: ServiceLauncher, trainer_vllm, tmp_path_factory
) -> Iterator[TrainingStack]:
    import parity

    data = tmp_path_factory.mktemp("training-stack")
    store = module_services.start(
        "store", "--url", f"sqlite:///{data}/store.db", "--shutdown-grace-s", "0.5"
    )
    assembler = module_services.start("assembler", "--store-address", store.address, "--group-idle-s", "5",
                                      "--shutdown-grace-s", "0.5")  # fmt: skip
    ingest, http_port = start_ingest(
        module_services, store.address, trainer_vllm.base_url, data / "spool.db"
    )
    trainer = module_services.start(
        "trainer", "--assembler-address", assembler.address, "--ingest-address", ingest.address,
        "--replicas", trainer_vllm.base_url, "--work-dir", str(data / "trainer"), "--shutdown-grace-s", "1",
    )  # fmt: skip
    previous = parity.current_config()
    parity.configure(
        ingest_url=f"http://127.0.0.1:{http_port}", assembler_address=assembler.address
    )
    yield TrainingStack(trainer_vllm, store, assembler, ingest, trainer, http_port)
    parity.configure(ingest_url=previous.ingest_url, assembler_address=previous.assembler_address)

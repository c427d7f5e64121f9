"""A production deployment on this machine: users' traffic on serving replicas, training on its own.

    users ──> users' ingest ──> serving vLLM      (changed only by a promotion)
                   │
                   └──> store <── assembler <── trainer ──> candidate vLLM <── training ingest
                                                   (every update)               (validation)

Both vLLMs serve the same model under the same name; the trainer holds the serving replicas
as `--serving-replicas`, so a run never reaches users until its candidate passes the gate.

With tenants, both vLLMs serve LoRA adapters beside the model (one per tenant), the trainer
trains one LoRA run per tenant at once, and the users' ingest sends a tenant's model name
(`assistant-TENANT`) to the base model until that tenant's first promotion serves its adapter.
Every process is a real Parity service (`parity <service> serve`) or a real vLLM, on free
loopback ports, without auth (loopback only), logging under the data folder.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from parity.services.inference.packaged_models import resolve_model
from parity.services.inference.vllm_launcher import VllmLaunchConfig, VllmServer, vllm_python
from parity.services.stack import ServiceProcess, free_port
from parity.training.settings import StackAddresses

SERVED_NAME = "assistant"
STARTUP_TIMEOUT_S = 600.0
TENANT_LORA_RANK = 8


def tenant_model(tenant: str) -> str:
    """The model name a tenant's agents ask for, and its promoted adapter is served under."""
    return f"{SERVED_NAME}-{tenant}"


@dataclass
class Deployment:
    data_dir: Path
    model: str = ""
    """A model name or folder; empty: the default model."""
    tenants: int = 0
    """Tenants trained at once, each its own LoRA adapter; 0: one whole-model policy for every user."""
    services: dict[str, ServiceProcess] = field(default_factory=dict)
    vllms: dict[str, VllmServer] = field(default_factory=dict)
    http_ports: dict[str, int] = field(default_factory=dict)

    def __enter__(self) -> Deployment:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def model_path(self) -> Path:
        return resolve_model(self.model).resolve()

    def users_url(self) -> str:
        """Where the deployed agent sends its calls: the users' ingest."""
        return f"http://127.0.0.1:{self.http_ports['users-ingest']}"

    def training_stack(self) -> StackAddresses:
        """The stack a from-store run uses: its validations go through the training ingest, to the candidate."""
        return StackAddresses(
            f"http://127.0.0.1:{self.http_ports['training-ingest']}", self.services["assembler"].address,
            self.services["trainer"].address, self.services["store"].address,
        )  # fmt: skip

    @property
    def trainer_address(self) -> str:
        return self.services["trainer"].address

    def start(self) -> None:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        model_path = self.model_path
        for name in ("serving", "candidate"):
            config = VllmLaunchConfig(
                model_path=model_path, port=free_port(), python=vllm_python(), served_model_name=SERVED_NAME,
                log_path=logs / f"vllm-{name}.log", startup_timeout_s=STARTUP_TIMEOUT_S,
                lora_rank=TENANT_LORA_RANK if self.tenants else 0, max_loras=max(1, self.tenants),
            )  # fmt: skip
            self.vllms[name] = VllmServer(config)
            self.vllms[name].start()
        for name in ("store", "assembler", "users-ingest", "training-ingest", "trainer"):
            self.services[name] = ServiceProcess(name, f"127.0.0.1:{free_port()}", logs / f"{name}.log",
                                                 service=name.split("-")[-1])  # fmt: skip
        self.http_ports = {"users-ingest": free_port(), "training-ingest": free_port()}
        store = self.services["store"].address
        ingests = {name: self.services[f"{name}-ingest"].address for name in ("users", "training")}
        arguments = {
            "store": ["--url", f"sqlite:///{self.data_dir / 'store.db'}"],
            "assembler": ["--store-address", store, "--group-idle-s", "2"],
            "users-ingest": self._ingest("users", self.vllms["serving"], store),
            "training-ingest": self._ingest("training", self.vllms["candidate"], store),
            "trainer": [
                "--assembler-address", self.services["assembler"].address, "--ingest-address", ingests["training"],
                "--replicas", self.vllms["candidate"].base_url, "--serving-replicas", self.vllms["serving"].base_url,
                "--serving-ingest-address", ingests["users"], "--work-dir", str(self.data_dir / "trainer"),
                *(["--max-concurrent-runs", str(self.tenants)] if self.tenants else []),
            ],
        }  # fmt: skip
        if self.tenants:
            arguments["users-ingest"] += ["--model-alias", f"{tenant_model('*')}={SERVED_NAME}"]
        for name, service in self.services.items():
            service.start(arguments[name], {})
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for service in self.services.values():
            service.wait_healthy(deadline, threading.Event())
        for vllm in self.vllms.values():
            vllm.wait_healthy(max(1.0, deadline - time.monotonic()))

    def _ingest(self, name: str, vllm: VllmServer, store: str) -> list[str]:
        return ["--http-port", str(self.http_ports[f"{name}-ingest"]), "--upstreams", vllm.base_url, "--store", store,
                "--spool-path", str(self.data_dir / f"{name}-spool.db"), "--health-interval-s", "1"]  # fmt: skip

    def stop(self) -> None:
        for service in reversed(self.services.values()):
            service.stop(grace_s=15.0)
        for vllm in self.vllms.values():
            vllm.stop()

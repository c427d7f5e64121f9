"""deploy/, validated offline (no container engine or cluster runs here): the Kubernetes manifests against
Kubernetes' own schemas, the compose file against the compose spec, and every Parity command in them
against Parity's own CLI and settings."""

from __future__ import annotations

import copy
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from parity.cli import build_parser
from parity.services.console.serve_command import build_parser as console_parser
from parity.services.console.settings import ConsoleConfig
from parity.services.runtime.config import config_from_args
from parity.services.runtime.service_definition import ServiceDefinition
from tests.conftest import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
KUBERNETES_VERSION = "1.32.0"
# What mesh_tokens writes (docs/deploy.md turns it into the Secrets and the compose folder).
TOKEN_FILES = {"table", "read.token", "agent.token", "service.token", "admin.token"}
SECRETS = {"parity-tokens", "parity-vllm", "parity-store", "parity-postgres", "parity-console"}


def manifests() -> list[dict[str, Any]]:
    found = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            found += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def containers(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for doc in documents if doc["kind"] in ("Deployment", "StatefulSet")
            for c in doc["spec"]["template"]["spec"]["containers"]]  # fmt: skip


def parity_config(argv: list[str], environment: dict[str, str], monkeypatch: pytest.MonkeyPatch):
    """The settings `parity ARGV` would run with: parsed by the real CLI, built by the service's own config class."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    if argv[:2] == ["console", "serve"]:
        return config_from_args(ConsoleConfig, console_parser().parse_args(argv[2:]), "console")
    args = build_parser(argv[0]).parse_args(argv)
    definition: ServiceDefinition = args.handler.__self__
    return config_from_args(definition.config_cls, args, definition.name)


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in KUBERNETES.glob("*.yaml") if p.name != "kustomization.yaml"
    )


@pytest.mark.parametrize(
    "document", manifests(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}"
)
def test_every_manifest_is_valid_kubernetes(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_a_broken_manifest_is_caught() -> None:
    (ingest,) = [
        d for d in manifests() if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "ingest"
    ]
    broken = copy.deepcopy(ingest)
    broken["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_services_are_scaled_as_their_state_allows_and_probed_on_health() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]): d for d in manifests()}
    assert kinds["Deployment", "assembler"]["spec"]["replicas"] == 1
    assert kinds["HorizontalPodAutoscaler", "ingest"]["spec"]["scaleTargetRef"]["name"] == "ingest"
    assert kinds["Service", "ingest-control"]["spec"]["clusterIP"] == "None"
    for container in containers(list(kinds.values())):
        assert "readinessProbe" in container, container["name"]
    # vLLM's development routes are open: only ingest and the trainer reach its pods.
    allowed = kinds["NetworkPolicy", "vllm"]["spec"]["ingress"][0]["from"]
    assert {rule["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for rule in allowed} == {
        "ingest",
        "trainer",
    }


def test_every_parity_container_runs_a_command_parity_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for container in containers(manifests()):
        if not container["image"].startswith("parity:"):
            continue
        # Values from Secrets, as an operator following docs/deploy.md would have them.
        from_secrets = {"PARITY_STORE_URL": "postgresql://parity:password@postgres:5432/parity"}
        environment = {e["name"]: e.get("value") or from_secrets.get(e["name"], "a-secret-of-at-least-16-chars")
                       for e in container.get("env", [])}  # fmt: skip
        environment.pop("PARITY_TOKEN_FILE", None)
        config = parity_config(container["args"], environment, monkeypatch)
        assert config.host == "0.0.0.0"
        if container["name"] == "trainer":
            assert config.ingest_addresses == (
                "dns:///ingest-control.parity.svc.cluster.local:50052",
            )


def test_secrets_and_token_files_are_the_documented_ones() -> None:
    documents = manifests()
    assert set(_secret_names(documents)) == SECRETS
    for container in containers(documents):
        for word in [
            *container.get("args", []),
            *(e.get("value", "") for e in container.get("env", [])),
        ]:
            if word.startswith("/etc/parity/tokens/"):
                assert word.removeprefix("/etc/parity/tokens/") in TOKEN_FILES, word


def test_the_compose_file_follows_the_compose_spec() -> None:
    result = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
                             str(DEPLOY / "compose.yaml")], capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_services_run_commands_parity_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    parity_services = [
        s for s in compose["services"].values() if s.get("image", "").startswith("parity:")
    ]
    assert len(parity_services) == 5
    for service in parity_services:
        environment = {
            k: v for k, v in (service.get("environment") or {}).items() if k != "PARITY_TOKEN_FILE"
        }
        # Variables an entrypoint sets from a secret file: `NAME=$$(cat /run/secrets/...)`.
        entrypoint = " ".join(service.get("entrypoint") or [])
        environment |= {
            word.split("=")[0]: "a-secret-from-its-file"
            for word in entrypoint.split()
            if "=$$(cat" in word
        }
        parity_config(service["command"], environment | {"PARITY_STORE_URL": "postgresql://parity@postgres/parity"},
                      monkeypatch)  # fmt: skip


def test_the_image_installs_extras_the_project_declares() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    extras = next(
        line.split("=", 1)[1] for line in dockerfile.splitlines() if line.startswith("ARG EXTRAS=")
    )
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(extras.split(",")) <= set(declared)
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (REPO_ROOT / source).exists(), source
    assert Path(REPO_ROOT / ".dockerignore").read_text().count(".venv") >= 1


def _secret_names(node: Any) -> list[str]:
    """Every Secret a manifest mounts (`secretName`) or reads a key of (`secretKeyRef.name`)."""
    if isinstance(node, list):
        return [name for item in node for name in _secret_names(item)]
    if not isinstance(node, dict):
        return []
    names = [node["secretName"]] if "secretName" in node else []
    if "secretKeyRef" in node:
        names.append(node["secretKeyRef"]["name"])
    return names + [name for value in node.values() for name in _secret_names(value)]

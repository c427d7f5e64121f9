"""What `parity up` hands each process: token files by role, vLLM's key, and off loopback a local CA's certificate."""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path

from cryptography import x509

from parity.services.stack.mesh_security import (
    mesh_tokens,
    service_environment,
    stack_certificates,
)


def test_each_process_gets_only_the_files_its_role_needs(tmp_path) -> None:
    tokens = mesh_tokens(tmp_path)
    assert sorted(p.name for p in tokens.iterdir()) == [
        "admin.token", "agent.token", "read.token", "service.token", "table", "vllm.key"]  # fmt: skip
    assert {p.stat().st_mode & 0o777 for p in tokens.iterdir()} == {0o600}
    store, trainer, console = (
        service_environment(name, tokens) for name in ("store", "trainer", "console")
    )
    assert store == {"PARITY_STORE_AUTH_TOKENS_FILE": str(tokens / "table")}
    assert trainer["PARITY_TOKEN_FILE"] == str(tokens / "admin.token")
    assert trainer["PARITY_TRAINER_REPLICA_API_KEY_FILE"] == str(tokens / "vllm.key")
    assert console == {"PARITY_TOKEN": "", "PARITY_TOKEN_FILE": str(tokens / "read.token")}
    secrets = {p.read_text().strip() for p in tokens.glob("*.token")}
    assert not any(
        secret in value
        for env in (store, trainer, console)
        for value in env.values()
        for secret in secrets
    )
    # A restart keeps the tokens clients already hold.
    before = (tokens / "agent.token").read_text()
    assert (mesh_tokens(tmp_path) / "agent.token").read_text() == before


def test_off_loopback_every_service_serves_a_certificate_of_a_local_ca(tmp_path) -> None:
    tls = stack_certificates(tmp_path, "0.0.0.0")
    certificate = x509.load_pem_x509_certificate(Path(tls.cert_file).read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("0.0.0.0") in names.get_values_for_type(x509.IPAddress)
    ssl.create_default_context(cafile=tls.ca_file)  # a CA a client can load
    environment = service_environment("ingest", mesh_tokens(tmp_path), tls)
    assert (
        environment["PARITY_INGEST_TLS_CERT_FILE"] == tls.cert_file
        and environment["PARITY_TLS_CA_FILE"] == tls.ca_file
    )
    # A restart keeps the CA clients already trust.
    assert stack_certificates(tmp_path, "0.0.0.0") == tls
    assert x509.load_pem_x509_certificate(Path(tls.cert_file).read_bytes()) == certificate

"""What the stack's processes prove who they are with: a token per role, the table every service checks them
against, vLLM's API key, and off loopback a certificate every service serves; and the environment that hands each
process its own.
"""

from __future__ import annotations

import datetime
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

from parity.services.runtime.auth import ROLES
from parity.services.stack.local_ca import LocalCertificateAuthority

# The role each process calls the others with: the least its calls need. The store calls nobody.
CLIENT_ROLES = {"ingest": "service", "assembler": "service", "trainer": "admin", "console": "read"}
VLLM_KEY_SETTINGS = {"ingest": "UPSTREAM_API_KEY_FILE", "trainer": "REPLICA_API_KEY_FILE"}


def mesh_tokens(data_dir: Path) -> Path:
    """One random token per role, DATA_DIR/tokens/ROLE.token, and the table every service checks them against,
    DATA_DIR/tokens/table, and vLLM's API key, DATA_DIR/tokens/vllm.key; all mode 0600. Kept across restarts,
    so clients holding one stay valid."""
    folder = data_dir / "tokens"
    folder.mkdir(mode=0o700, exist_ok=True)
    for name in (*(f"{role}.token" for role in ROLES), "vllm.key"):
        path = folder / name
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(32) + "\n")
    lines = [f"{role} {(folder / f'{role}.token').read_text().strip()}\n" for role in ROLES]
    table = folder / "table"
    table.touch(mode=0o600)
    table.write_text("".join(lines))
    return folder


@dataclass(frozen=True)
class StackCertificates:
    ca_file: str
    cert_file: str
    key_file: str


def stack_certificates(data_dir: Path, host: str) -> StackCertificates:
    """Off loopback: a local CA, DATA_DIR/tls/ca.crt, and one certificate every service serves, valid for `host`,
    this machine's name and loopback. Made on the first start, kept after; clients trust ca.crt."""
    folder = data_dir / "tls"
    certificate = StackCertificates(
        str(folder / "ca.crt"), str(folder / "stack.crt"), str(folder / "stack.key")
    )
    if not all(
        Path(path).exists()
        for path in (certificate.ca_file, certificate.cert_file, certificate.key_file)
    ):
        authority = LocalCertificateAuthority(folder, valid_for=datetime.timedelta(days=365))
        authority.issue("stack", hosts=(host, socket.gethostname(), "localhost", "127.0.0.1"))
    return certificate


def service_environment(
    name: str, tokens: Path, tls: StackCertificates | None = None
) -> dict[str, str]:
    """What a process of the stack gets: the table it checks callers against, the one token it calls others with,
    and, off loopback, the certificate it serves and the CA it trusts."""
    environment = (
        {}
        if name == "console"
        else {f"PARITY_{name.upper()}_AUTH_TOKENS_FILE": str(tokens / "table")}
    )
    if tls is not None:
        environment["PARITY_TLS_CA_FILE"] = tls.ca_file
        if name != "console":
            environment |= {f"PARITY_{name.upper()}_TLS_CERT_FILE": tls.cert_file,
                            f"PARITY_{name.upper()}_TLS_KEY_FILE": tls.key_file}  # fmt: skip
    # Only ingest and the trainer talk to vLLM.
    if name in VLLM_KEY_SETTINGS:
        environment[f"PARITY_{name.upper()}_{VLLM_KEY_SETTINGS[name]}"] = str(tokens / "vllm.key")
    if name in CLIENT_ROLES:
        # A PARITY_TOKEN of the caller's own shell would win over the file.
        environment |= {
            "PARITY_TOKEN": "",
            "PARITY_TOKEN_FILE": str(tokens / f"{CLIENT_ROLES[name]}.token"),
        }
    return environment

"""A local certificate authority: the CA `parity up --host` makes for a stack off loopback, and the tests' and
benchmarks' TLS. Its certificates are valid for the names and addresses they are issued for; keys are mode 0600."""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


class LocalCertificateAuthority:
    def __init__(
        self, folder: Path, valid_for: datetime.timedelta = datetime.timedelta(hours=1)
    ) -> None:
        self.folder = folder
        self.valid_for = valid_for
        folder.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "parity-local-ca")])
        ca = self._builder(self._name, self._key).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True
        )
        # Only the certificate: the CA's key stays in memory, so nothing on disk can sign another certificate.
        self.ca_file = self._write_certificate("ca", ca.sign(self._key, hashes.SHA256()))

    def issue(self, name: str, hosts: tuple[str, ...] = ("127.0.0.1",)) -> tuple[str, str]:
        """A certificate for `name`, valid at each of `hosts` (addresses or DNS names), signed by the CA:
        (certificate file, key file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        certificate = (
            self._builder(subject, key)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.SubjectAlternativeName([_general_name(host) for host in hosts]), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        return str(self._write_certificate(name, certificate)), str(self._write_key(name, key))

    def _builder(
        self, subject: x509.Name, key: ec.EllipticCurvePrivateKey
    ) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(self._name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
                .not_valid_after(now + self.valid_for))  # fmt: skip

    def _write_certificate(self, name: str, certificate: x509.Certificate) -> Path:
        path = self.folder / f"{name}.crt"
        path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        return path

    def _write_key(self, name: str, key: ec.EllipticCurvePrivateKey) -> Path:
        path = self.folder / f"{name}.key"
        # Created 0600, so the key is never readable by others, not even before a chmod.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()))  # fmt: skip
        return path


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)

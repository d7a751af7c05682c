"""The cluster's SASL_SSL listener: TLS material and the SCRAM user's password.

Made once, when the cluster first starts, and kept under the platform directory:

* ``tls/ca.pem``: a self-signed CA, the one clients trust (``ssl.ca.location``);
  ``tls/ca-key.pem`` its key (0600), kept to sign more certificates later;
* ``tls/broker.pem``: the brokers' key store, a PKCS#8 private key and the certificate chain in one
  PEM file (0600), for ``127.0.0.1`` and ``localhost``; every node uses the same one;
* ``secrets/kafka-scram-lockstep``: a random password for the SCRAM-SHA-512 user ``lockstep``
  (directory 0700, file 0600). The broker never sees it in a file or on a command line: the
  credential is created through the admin API after the brokers start (see ``kafka.add_scram_user``).
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

SCRAM_USER = "lockstep"
SCRAM_MECHANISM = "SCRAM-SHA-512"
VALID_DAYS = 3650


@dataclass(frozen=True)
class SecureListener:
    """Where the cluster's TLS files and SCRAM password live."""

    tls_dir: Path
    secrets_dir: Path
    user: str = SCRAM_USER
    mechanism: str = SCRAM_MECHANISM

    @property
    def ca_file(self) -> Path:
        return self.tls_dir / "ca.pem"

    @property
    def ca_key_file(self) -> Path:
        return self.tls_dir / "ca-key.pem"

    @property
    def keystore_file(self) -> Path:
        return self.tls_dir / "broker.pem"

    @property
    def password_file(self) -> Path:
        return self.secrets_dir / f"kafka-scram-{self.user}"

    def ensure(self) -> bool:
        """Create whatever is missing; True if anything was created."""
        created = False
        if not (self.ca_file.exists() and self.ca_key_file.exists() and self.keystore_file.exists()):
            write_tls_material(self.tls_dir, self.ca_file, self.ca_key_file, self.keystore_file)
            created = True
        if not self.password_file.exists():
            _write_private(self.password_file, secrets.token_hex(24) + "\n")
            created = True
        return created

    def password(self) -> str:
        return self.password_file.read_text().strip()


def _write_private(path: Path, text: str | bytes) -> None:
    """Write a file only its owner can read, in a directory only its owner can enter."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    data = text.encode() if isinstance(text, str) else text
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


def write_tls_material(tls_dir: Path, ca_file: Path, ca_key_file: Path, keystore_file: Path) -> None:
    """A CA and a broker certificate for 127.0.0.1 / localhost it signed (EC P-256, PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Lockstep dev CA")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pkcs8 = serialization.PrivateFormat.PKCS8  # Kafka's PEM key store reads PKCS#8 only
    none = serialization.NoEncryption()
    pem = serialization.Encoding.PEM
    tls_dir.mkdir(parents=True, exist_ok=True)
    _write_private(ca_key_file, ca_key.private_bytes(pem, pkcs8, none))
    _write_private(keystore_file, key.private_bytes(pem, pkcs8, none) + cert.public_bytes(pem)
                   + ca_cert.public_bytes(pem))
    ca_file.write_bytes(ca_cert.public_bytes(pem))  # public: clients read it

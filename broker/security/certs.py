"""Development certificates: one CA, a server certificate and client certificates.

Why our own generator: a development cluster needs a CA the clients can trust and
server certificates whose subjectAltNames cover the addresses the brokers advertise
(127.0.0.1 and localhost on a laptop), and `openssl` recipes for SANs are error-prone.
The server certificate carries both serverAuth and clientAuth so a broker can present
the same pair for its own outbound connections (mutual TLS between brokers).

EC P-256 keys: handshakes are several times cheaper than RSA-2048, which matters when
many clients reconnect at once.  Private keys are written with mode 0600; a key password
encrypts every private key (PKCS#8, the best available encryption).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class DevCerts:
    """Where genCerts wrote each file."""

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_certs: dict[str, tuple[Path, Path]]  # name -> (cert, key)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "RocketScope development"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _san(hosts: Iterable[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for h in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return x509.SubjectAlternativeName(names)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: str | None) -> None:
    enc: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption())
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o600)


def _leaf(cn: str, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, days: int,
          usages: Sequence[x509.ObjectIdentifier], hosts: Iterable[str]) -> tuple[x509.Certificate,
                                                                                   ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                            data_encipherment=False, key_agreement=True, key_cert_sign=False,
                                            crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    hosts = list(hosts)
    if hosts:
        builder = builder.add_extension(_san(hosts), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def generate_dev_certs(out_dir: str | Path, hosts: Sequence[str] = (), days: int = 825,
                       clients: Sequence[str] = ("client",), key_password: str | None = None,
                       overwrite: bool = False) -> DevCerts:
    """Write ca.pem/ca.key, server.pem/server.key and <client>.pem/<client>.key into ``out_dir``.

    ``hosts`` are added to the server certificate's SANs next to 127.0.0.1, localhost and ::1.
    Refuses to overwrite existing files unless ``overwrite`` (a CA key is not something to lose by accident).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = ["ca.pem", "ca.key", "server.pem", "server.key"] + [f"{c}.{ext}" for c in clients for ext in ("pem", "key")]
    existing = [f for f in files if (out / f).exists()]
    if existing and not overwrite:
        raise FileExistsError(f"{out} already has {', '.join(existing)} (use --force to replace them)")
    for c in clients:
        if c in ("ca", "server") or not c or "/" in c:
            raise ValueError(f"client name {c!r} is not allowed")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    ca_name = _name("RocketScope development CA")
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days + 30))
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (out / "ca.pem").write_bytes(ca_cert.public_bytes(pem))
    _write_key(out / "ca.key", ca_key, key_password)
    server_hosts = [*DEFAULT_HOSTS, *hosts]
    server_cert, server_key = _leaf(server_hosts[0] if not hosts else hosts[0], ca_cert, ca_key, days,
                                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], server_hosts)
    (out / "server.pem").write_bytes(server_cert.public_bytes(pem))
    _write_key(out / "server.key", server_key, key_password)
    client_files: dict[str, tuple[Path, Path]] = {}
    for c in clients:
        cert, key = _leaf(c, ca_cert, ca_key, days, [ExtendedKeyUsageOID.CLIENT_AUTH], ())
        (out / f"{c}.pem").write_bytes(cert.public_bytes(pem))
        _write_key(out / f"{c}.key", key, key_password)
        client_files[c] = (out / f"{c}.pem", out / f"{c}.key")
    return DevCerts(out / "ca.pem", out / "ca.key", out / "server.pem", out / "server.key", client_files)

"""Certificates and SuperNode keys for a TLS deployment with node authentication.

``write_pki(folder, clients)`` writes, with the ``cryptography`` library (a dependency of
Flower): a certificate authority (``ca.pem``), the SuperLink's certificate and key for a host
name or IP (``server.pem``, ``server.key``) and, per client, an EC P-384 key pair in OpenSSH
format (``<client>.key``, ``<client>.pub``), the form ``flower-supernode
--auth-supernode-private-key`` and ``flwr supernode register`` take. It is meant for tests,
trials and loopback deployments: institutions use their own CA, and each keeps its private key.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_DAYS = 30


@dataclass(frozen=True)
class Pki:
    """Paths of the files ``write_pki`` wrote."""

    folder: Path
    clients: tuple[str, ...]

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.folder / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.folder / "server.key"

    def node_key(self, client: str) -> Path:
        return self.folder / f"{client}.key"

    def node_pub(self, client: str) -> Path:
        return self.folder / f"{client}.pub"


def name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_node_keys(folder: Path, client: str) -> None:
    """One SuperNode's key pair, OpenSSH format (private key readable by its owner only)."""
    key = ec.generate_private_key(ec.SECP384R1())
    private = folder / f"{client}.key"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    (folder / f"{client}.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))


def write_pki(folder: str | Path, clients: list[str], host: str = "127.0.0.1") -> Pki:
    """A CA, a SuperLink certificate for ``host`` (also valid for localhost) and node keys."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca = (x509.CertificateBuilder().subject_name(name("fedpgm test CA")).issuer_name(name("fedpgm test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    alt: list[x509.GeneralName]
    try:
        alt = [x509.IPAddress(ipaddress.ip_address(host))]
    except ValueError:
        alt = [x509.DNSName(host)]
    server_key = ec.generate_private_key(ec.SECP384R1())
    server = (x509.CertificateBuilder().subject_name(name(host)).issuer_name(ca.subject)
              .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
              .add_extension(x509.SubjectAlternativeName(alt + [x509.DNSName("localhost")]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    pki = Pki(folder, tuple(clients))
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    pki.server_key.write_bytes(pem_key(server_key))
    pki.server_key.chmod(0o600)
    for c in clients:
        write_node_keys(folder, c)
    return pki

"""The trust of a deployment across machines: certificates, SuperNode keys, the signed app and
the Fleet gateway (``python -m fedpgm.federation.pki write|sign-app|fleet-gateway``).

- ``write_pki(folder, clients)`` writes, with the ``cryptography`` library (a dependency of
  Flower): a certificate authority (``ca.pem``), the SuperLink's certificate and key for a host
  name or IP (``server.pem``, ``server.key``), per client an EC P-384 key pair in OpenSSH format
  (``<client>.key``, ``<client>.pub``), the form ``flower-supernode --auth-supernode-private-key``
  and ``flwr supernode register`` take, and the coordinator's Ed25519 app-signing key
  (``app-signing.key``, as ``ssh-keygen -t ed25519`` writes it) with ``trusted-entities.yaml``,
  the file every SuperNode gets (``flower-supernode --trusted-entities``). It is meant for tests,
  trials and loopback deployments: institutions use their own CA, and each keeps its private key.
- ``sign_app`` signs the fedpgm app's FAB, byte for byte the one ``flwr run`` builds, in Flower
  1.41's own format (``sign_fab``; what Flower Hub attaches after ``flwr app review``).
- ``fleet_gateway``: Flower 1.41 serves its Control, Fleet and Runtime APIs on one port, and the
  Control API has no authentication outside Flower Enterprise. The SuperLink therefore listens on
  127.0.0.1 only, and this gateway, the one port other machines reach, forwards Flower's Fleet API
  (``POST /v1/fleet/...``) and nothing else; on the way it attaches the coordinator's signature to
  the FAB a SuperNode fetches. A local ``flwr run`` FAB reaches SuperNodes with no verification
  entries (1.41 takes them from Flower Hub only), so without the gateway a SuperNode with
  ``--trusted-entities`` refuses every local app. Signatures are checked by the SuperNodes
  (Flower's code, their trusted entities): the gateway cannot make an app trusted.
- ``fingerprint`` names a SuperNode's public key as ``ssh-keygen -l`` does (``SHA256:...``): a
  run's allow-list maps these to client ids (``fedpgm.federation.flower``).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import hashlib
import ipaddress
import json
import ssl
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from fedpgm.federation.identity import Identity

VALID_DAYS = 30
SIGNER = "fpk_fedpgm_coordinator"  # the app signer's id in trusted-entities.yaml (Flower: fpk_...)


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

    @property
    def app_key(self) -> Path:
        """The coordinator's Ed25519 app-signing key (it signs the FABs SuperNodes may run)."""
        return self.folder / "app-signing.key"

    @property
    def trusted_entities(self) -> Path:
        """``flower-supernode --trusted-entities``: the signers whose apps a SuperNode runs."""
        return self.folder / "trusted-entities.yaml"

    def identity(self, client: str) -> Path:
        """The party's Ed25519 identity key (``fedpgm.federation.identity``: signs its PSI messages)."""
        return self.folder / f"{client}.identity"

    @property
    def roster(self) -> Path:
        """Every party's identity public key, by client id: what each party checks PSI messages by."""
        return self.folder / "roster.json"

    def allow_list(self, clients: list[str]) -> dict[str, str]:
        """A run's ``node-keys``: each client's SuperNode key fingerprint -> its client id."""
        return {fingerprint(self.node_pub(c)): c for c in clients}

    def gateway_args(self, superlink: str, signatures: Path, host: str, port: int) -> list[str]:
        """The ``fleet-gateway`` command in front of the SuperLink at ``superlink`` (its loopback)."""
        return [sys.executable, "-m", "fedpgm.federation.pki", "fleet-gateway", "--superlink", superlink,
                "--ssl-ca-certfile", str(self.ca), "--ssl-certfile", str(self.server_cert),
                "--ssl-keyfile", str(self.server_key), "--signatures", str(signatures),
                "--host", host, "--port", str(port)]


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


def write_signing_key(folder: Path, name: str = "app-signing", signer: str = SIGNER) -> None:
    """An Ed25519 app-signing key pair (``name.key``, ``name.pub``, OpenSSH) and the
    ``trusted-entities.yaml`` that trusts it (``{signer: "ssh-ed25519 ..."}``)."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = folder / f"{name}.key"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    (folder / f"{name}.pub").write_bytes(public)
    (folder / "trusted-entities.yaml").write_text(f"{signer}: {public.decode()}\n")


def sign_fab(fab: bytes, key_path: Path, signer: str = SIGNER) -> dict[str, str]:
    """A FAB's verification entry as Flower 1.41 checks it (``flower-supernode
    --trusted-entities``): an Ed25519 signature of 8-byte big-endian ``signed_at`` + SHA-256 of
    the FAB, base64url, under the signer's id (what Flower Hub attaches after ``flwr app review``)."""
    key = serialization.load_ssh_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ValueError(f"{key_path} is not an Ed25519 key; make one with ssh-keygen -t ed25519")
    signed_at = int(time.time())
    signature = key.sign(signed_at.to_bytes(8, "big") + hashlib.sha256(fab).digest())
    b64 = base64.urlsafe_b64encode(signature).rstrip(b"=").decode()
    return {signer: json.dumps({"signature": b64, "signed_at": signed_at})}


def fingerprint(public_key: bytes | str | Path) -> str:
    """``SHA256:...`` of an OpenSSH public key (a ``.pub`` file or its text), as ``ssh-keygen -l``."""
    text = public_key.read_bytes() if isinstance(public_key, Path) else public_key
    blob = base64.b64decode((text.encode() if isinstance(text, str) else text).split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def write_pki(folder: str | Path, clients: list[str], host: str = "127.0.0.1") -> Pki:
    """A CA, a SuperLink certificate for ``host`` (also valid for localhost), node keys, the
    parties' identity keys with their roster, and the app-signing key with the
    ``trusted-entities.yaml`` that trusts it."""
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
    for c, identity in Identity.generate(list(clients)).items():
        identity.save(pki.identity(c), pki.roster)
    write_signing_key(folder)
    return pki


def sign_app(key: str | Path, out: str | Path, app: Path | None = None, signer: str = SIGNER) -> Path:
    """Sign the fedpgm app's FAB as ``flwr run`` builds it from ``app`` (default the installed
    one): writes ``out/<SHA-256 of the FAB>.json``, the verification entry the gateway attaches."""
    from flwr.cli.build import build_fab_from_disk

    from fedpgm.federation.apps import app_dir

    fab = build_fab_from_disk(app or app_dir())
    Path(out).mkdir(parents=True, exist_ok=True)
    path = Path(out) / f"{hashlib.sha256(fab).hexdigest()}.json"
    path.write_text(json.dumps(sign_fab(fab, Path(key), signer)))
    return path


FLEET = "/v1/fleet/"
HOP_HEADERS = {"host", "content-length", "connection", "transfer-encoding", "content-encoding", "accept-encoding"}


def attach_signature(body: bytes, signatures: Path) -> bytes:
    """A Fleet ``get-fab`` response with the signature of its FAB (``signatures/<sha256>.json``)
    among the FAB's verifications; unchanged when there is none (a SuperNode then refuses it)."""
    from flwr.proto.fab_pb2 import GetFabResponse

    response = GetFabResponse.FromString(body)
    path = signatures / f"{hashlib.sha256(response.fab.content).hexdigest()}.json"
    if not path.is_file():
        return body
    # Flower 1.41's SuperNode reads a FAB with no "valid_license" entry as unverifiable (Hub sets it)
    response.fab.verifications.update({**json.loads(path.read_text()), "valid_license": "Valid"})
    return response.SerializeToString()


def fleet_gateway(superlink: str, ca: Path, signatures: Path):
    """An ASGI app serving Flower's Fleet API only: ``POST /v1/fleet/...`` goes to the SuperLink at
    ``superlink`` (``host:port``, TLS checked against ``ca``); anything else (the Control and Runtime
    APIs) gets 404."""
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False  # the SuperLink on this host's loopback; its certificate is checked
    client = httpx.AsyncClient(base_url=f"https://{superlink}", verify=context, timeout=120.0)

    async def forward(request: Request) -> Response:
        path = request.url.path
        if request.method != "POST" or not path.startswith(FLEET):
            return PlainTextResponse("only Flower's Fleet API is served here", status_code=404)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        reply = await client.post(path, content=await request.body(), headers=headers)
        body = reply.content
        if path == FLEET + "get-fab" and reply.is_success:
            body = attach_signature(body, signatures)
        return Response(body, reply.status_code,
                        {k: v for k, v in reply.headers.items() if k.lower() not in HOP_HEADERS})

    return Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])])


def main(argv: list[str] | None = None) -> None:
    """``python -m fedpgm.federation.pki write|sign-app|fleet-gateway``; see docs/runtime.md."""
    parser = argparse.ArgumentParser(prog="python -m fedpgm.federation.pki")
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write", help="a test CA, the SuperLink's certificate, node keys, the app-signing key")
    write.add_argument("folder", type=Path)
    write.add_argument("--clients", required=True, help="client ids, comma-separated")
    write.add_argument("--host", default="127.0.0.1", help="the name or IP SuperNodes connect to")
    sign = sub.add_parser("sign-app", help="sign the installed fedpgm app (again after each upgrade)")
    sign.add_argument("--key", required=True, type=Path, help="the Ed25519 app-signing key (OpenSSH)")
    sign.add_argument("--out", required=True, type=Path, help="the gateway's signatures folder")
    sign.add_argument("--signer", default=SIGNER, help="the key's id in trusted-entities.yaml")
    gate = sub.add_parser("fleet-gateway", help="serve the SuperLink's Fleet API only, with the app's signatures")
    gate.add_argument("--superlink", required=True, help="the SuperLink's loopback address, e.g. 127.0.0.1:9201")
    for flag in ("--ssl-ca-certfile", "--ssl-certfile", "--ssl-keyfile", "--signatures"):
        gate.add_argument(flag, required=True, type=Path)
    gate.add_argument("--host", default="0.0.0.0")
    gate.add_argument("--port", type=int, default=9200)
    args = parser.parse_args(argv)
    if args.command == "write":
        print(write_pki(args.folder, args.clients.split(","), args.host).folder)
    elif args.command == "sign-app":
        print(sign_app(args.key, args.out, signer=args.signer))
    else:
        import uvicorn

        uvicorn.run(fleet_gateway(args.superlink, args.ssl_ca_certfile, args.signatures), host=args.host,
                    port=args.port, ssl_certfile=str(args.ssl_certfile), ssl_keyfile=str(args.ssl_keyfile))


if __name__ == "__main__":
    main()

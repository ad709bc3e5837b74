"""Party identities: each institution's Ed25519 signing key and X25519 box key, and the roster of
every party's public keys, so that parties can authenticate each other's messages, and send each
other secrets, end to end through a coordinator they do not trust (``fedpgm.federation.psi``
signs every PSI step; ``fedpgm.federation.secret`` deals a key the coordinator never sees).

The roster is the deployment's PKI: fixed before a run and given to every party out of band
(``fedpgm.federation.deploy`` writes one per deployment; the in-process backend, one operator
playing every party, makes one per federation). A message signed by a roster key cannot be forged
or altered by the relay; a party that is not on the roster cannot sign at all.

Why ``cryptography``: it is the field's well-kept implementation of Ed25519, X25519, HKDF and
ChaCha20-Poly1305; this module only decides what is signed or sealed (a domain tag, the sender,
the recipient and SHA-256 digests of the payload) and how keys are stored (raw 32-byte keys, hex
in JSON).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from fedpgm.data.policy import PolicyRefusal
from fedpgm.errors import FedpgmError

DOMAIN = b"fedpgm-v1"


def digest(*parts) -> bytes:
    """SHA-256 over length-prefixed parts (str, bytes or uint8 arrays): no two part lists collide."""
    h = hashlib.sha256(DOMAIN)
    for p in parts:
        data = p.encode() if isinstance(p, str) else np.asarray(p, np.uint8).tobytes()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.digest()


def raw(key) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def box_key(sender: str, recipient: str, shared: bytes) -> bytes:
    return HKDF(hashes.SHA256(), 32, None, digest("box", sender, recipient)).derive(shared)


@dataclass(frozen=True)
class Identity:
    """One party's signing key and box key (raw 32 bytes each) and the roster: client id ->
    (Ed25519 public key, X25519 public key), raw."""
    client_id: str
    key: bytes
    box: bytes
    roster: dict[str, tuple[bytes, bytes]]

    def __post_init__(self) -> None:
        own = self.roster.get(self.client_id)
        public = (raw(Ed25519PrivateKey.from_private_bytes(self.key).public_key()),
                  raw(X25519PrivateKey.from_private_bytes(self.box).public_key()))
        if own != public:
            raise FedpgmError(f"the roster's keys for '{self.client_id}' are not this party's own keys; "
                              "give every party the deployment's roster")

    def sign(self, *parts) -> np.ndarray:
        """(64,) uint8 signature over ``digest(client_id, *parts)``."""
        signature = Ed25519PrivateKey.from_private_bytes(self.key).sign(digest(self.client_id, *parts))
        return np.frombuffer(signature, np.uint8).copy()

    def verify(self, signer: str, signature, *parts) -> None:
        """Refuse (``PolicyRefusal``) unless ``signer`` is on the roster and signed ``parts``."""
        public = self.public(signer)[0]
        try:
            Ed25519PublicKey.from_public_bytes(public).verify(np.asarray(signature, np.uint8).tobytes(),
                                                             digest(signer, *parts))
        except (InvalidSignature, ValueError):
            raise PolicyRefusal(f"client '{self.client_id}' refuses a message said to come from '{signer}': "
                                "its signature does not verify (forged or altered by the relay)") from None

    def public(self, party: str) -> tuple[bytes, bytes]:
        if party not in self.roster:
            raise PolicyRefusal(f"client '{self.client_id}' does not know party '{party}' (not on its roster)")
        return self.roster[party]

    def seal(self, recipient: str, data: bytes) -> np.ndarray:
        """(32 + len(data) + 16,) uint8: ``data`` encrypted for ``recipient`` alone (an ephemeral
        X25519 key agreed with its box key, ChaCha20-Poly1305); only it can open it."""
        ephemeral = X25519PrivateKey.generate()
        shared = ephemeral.exchange(X25519PublicKey.from_public_bytes(self.public(recipient)[1]))
        sealed = ChaCha20Poly1305(box_key(self.client_id, recipient, shared)).encrypt(bytes(12), data, None)
        return np.frombuffer(raw(ephemeral.public_key()) + sealed, np.uint8).copy()

    def open(self, sender: str, sealed) -> bytes:
        """The data ``sender`` sealed for this party; ``PolicyRefusal`` if it was not."""
        blob = np.asarray(sealed, np.uint8).tobytes()
        try:
            ephemeral = X25519PublicKey.from_public_bytes(blob[:32])
            shared = X25519PrivateKey.from_private_bytes(self.box).exchange(ephemeral)
            return ChaCha20Poly1305(box_key(sender, self.client_id, shared)).decrypt(bytes(12), blob[32:], None)
        except (InvalidTag, ValueError):
            raise PolicyRefusal(f"client '{self.client_id}' cannot open a secret said to come from "
                                f"'{sender}'") from None

    @staticmethod
    def generate(client_ids: list[str]) -> dict[str, "Identity"]:
        """Fresh keys for ``client_ids`` and their common roster."""
        signing = {c: Ed25519PrivateKey.generate() for c in client_ids}
        boxes = {c: X25519PrivateKey.generate() for c in client_ids}
        roster = {c: (raw(signing[c].public_key()), raw(boxes[c].public_key())) for c in client_ids}
        return {c: Identity(c, signing[c].private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()),
                            boxes[c].private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()), roster)
                for c in client_ids}

    # -- files (a deployment's): the keys as hex, the roster as JSON {client id: {sign, box} hex} --
    def save(self, key_file: Path, roster_file: Path) -> None:
        key_file.write_text(json.dumps({"sign": self.key.hex(), "box": self.box.hex()}))
        key_file.chmod(0o600)
        roster_file.write_text(json.dumps({c: {"sign": s.hex(), "box": b.hex()} for c, (s, b) in self.roster.items()},
                                          indent=1))

    @staticmethod
    def load(client_id: str, key_file: str | Path, roster_file: str | Path) -> "Identity":
        try:
            own = json.loads(Path(key_file).read_text())
            key, box = bytes.fromhex(str(own["sign"])), bytes.fromhex(str(own["box"]))
            doc = json.loads(Path(roster_file).read_text())
            roster = {str(c): (bytes.fromhex(str(k["sign"])), bytes.fromhex(str(k["box"]))) for c, k in doc.items()}
        except (OSError, ValueError, AttributeError, KeyError, TypeError) as e:
            raise FedpgmError(f"cannot read identity key '{key_file}' or roster '{roster_file}' ({e}); "
                              "use the files the deployment wrote") from None
        if any(len(k) != 32 for k in (key, box, *(k for pair in roster.values() for k in pair))):
            raise FedpgmError(f"identity key '{key_file}' or roster '{roster_file}' holds keys that are not "
                              "32-byte Ed25519 / X25519 keys")
        return Identity(client_id, key, box, roster)

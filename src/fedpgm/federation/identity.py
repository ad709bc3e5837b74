"""Party identities: each institution's Ed25519 signing key and the roster of every party's public
key, so that parties can authenticate each other's messages end to end through a coordinator
they do not trust (``fedpgm.federation.psi`` signs every PSI step with them).

The roster is the deployment's PKI: fixed before a run and given to every party out of band
(``fedpgm.federation.deploy`` writes one per deployment; the in-process backend, one operator
playing every party, makes one per federation). A message signed by a roster key cannot be forged
or altered by the relay; a party that is not on the roster cannot sign at all.

Why ``cryptography``: it is the field's well-kept implementation of Ed25519; this module only
decides what is signed (a domain tag, the signer, the recipient and SHA-256 digests of the
payload) and how keys are stored (raw 32-byte keys, hex in JSON).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
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


@dataclass(frozen=True)
class Identity:
    """One party's signing key (raw 32 bytes) and the roster (client id -> raw public key)."""
    client_id: str
    key: bytes
    roster: dict[str, bytes]

    def __post_init__(self) -> None:
        own = self.roster.get(self.client_id)
        public = Ed25519PrivateKey.from_private_bytes(self.key).public_key().public_bytes(Encoding.Raw,
                                                                                         PublicFormat.Raw)
        if own != public:
            raise FedpgmError(f"the roster's key for '{self.client_id}' is not this party's own key; "
                              "give every party the deployment's roster")

    def sign(self, *parts) -> np.ndarray:
        """(64,) uint8 signature over ``digest(client_id, *parts)``."""
        signature = Ed25519PrivateKey.from_private_bytes(self.key).sign(digest(self.client_id, *parts))
        return np.frombuffer(signature, np.uint8).copy()

    def verify(self, signer: str, signature, *parts) -> None:
        """Refuse (``PolicyRefusal``) unless ``signer`` is on the roster and signed ``parts``."""
        public = self.roster.get(signer)
        if public is None:
            raise PolicyRefusal(f"client '{self.client_id}' does not know party '{signer}' (not on its roster)")
        try:
            Ed25519PublicKey.from_public_bytes(public).verify(np.asarray(signature, np.uint8).tobytes(),
                                                             digest(signer, *parts))
        except (InvalidSignature, ValueError):
            raise PolicyRefusal(f"client '{self.client_id}' refuses a message said to come from '{signer}': "
                                "its signature does not verify (forged or altered by the relay)") from None

    @staticmethod
    def generate(client_ids: list[str]) -> dict[str, "Identity"]:
        """Fresh keys for ``client_ids`` and their common roster."""
        keys = {c: Ed25519PrivateKey.generate() for c in client_ids}
        raw = {c: k.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()) for c, k in keys.items()}
        roster = {c: k.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw) for c, k in keys.items()}
        return {c: Identity(c, raw[c], roster) for c in client_ids}

    # -- files (a deployment's): the key as hex, the roster as JSON {client id: public key hex} --
    def save(self, key_file: Path, roster_file: Path) -> None:
        key_file.write_text(self.key.hex())
        key_file.chmod(0o600)
        roster_file.write_text(json.dumps({c: k.hex() for c, k in self.roster.items()}, indent=1))

    @staticmethod
    def load(client_id: str, key_file: str | Path, roster_file: str | Path) -> "Identity":
        try:
            key = bytes.fromhex(Path(key_file).read_text().strip())
            doc = json.loads(Path(roster_file).read_text())
            roster = {str(c): bytes.fromhex(str(k)) for c, k in doc.items()}
        except (OSError, ValueError, AttributeError) as e:
            raise FedpgmError(f"cannot read identity key '{key_file}' or roster '{roster_file}' ({e}); "
                              "use the files the deployment wrote") from None
        if len(key) != 32 or any(len(k) != 32 for k in roster.values()):
            raise FedpgmError(f"identity key '{key_file}' or roster '{roster_file}' holds keys that are not "
                              "32-byte Ed25519 keys")
        return Identity(client_id, key, roster)

"""A secret the parties share and the coordinator never sees: the key of the keyed hashes by
which rows are matched across parties (FedPC's aligned gluing) without any id, or any hash the
coordinator could invert, leaving a party.

Two round trips (``share_secret``): each party but the dealer draws a fresh nonce for the run
(``secret_nonce``); the dealer (a party) draws a 32-byte key, seals it for each other party with
that party's box key and signs each sealed copy together with that party's nonce and the list of
parties (``fedpgm.federation.identity``); each party checks the signature against the roster and
its own nonce and opens its copy. The coordinator relays sealed bytes it cannot open and cannot
forge, and cannot replay a copy dealt in another run (its nonce differs). Each party takes part
once per run; the key and the list of parties live in the run's state only. ``row_tokens`` turns
row ids into 64-bit keyed hashes (BLAKE2b keyed with the secret): equal ids give equal tokens at
every party, and without the key the tokens say nothing of the ids (a server's brute force over
candidate ids needs the key). ``cancelling_masks`` gives each party per-row masks that sum to zero
over the dealt parties, so a sum of masked values (FedPC's co-occurrence counts) reaches the
coordinator while no one party's values do.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from fedpgm.data.policy import PolicyRefusal
from fedpgm.errors import FedpgmError
from fedpgm.federation.codec import Message
from fedpgm.federation.contract import NOTHING, Array, Contract, ListOf, Text
from fedpgm.federation.handlers import ClientContext, HandlerSet

SECRET = "secret/key"  # state: (32,) uint8, the run's shared key
PARTIES = "secret/parties"  # state: the parties that share it, the dealer first
NONCE = "secret/nonce"  # state: (16,) uint8, this party's nonce of the run


def identity_of(ctx: ClientContext):
    if ctx.identity is None:
        raise PolicyRefusal(f"client '{ctx.client_id}' has no identity key and roster, so it cannot share a "
                            "secret with the other parties; give its node the deployment's identity files")
    return ctx.identity


def keep_once(ctx: ClientContext, key: bytes, parties: list[str]) -> None:
    if SECRET in ctx.state:
        raise PolicyRefusal(f"client '{ctx.client_id}' already shares this run's secret (once per run)")
    ctx.state[SECRET] = np.frombuffer(key, np.uint8).copy()
    ctx.state[PARTIES] = list(parties)


HANDLERS = HandlerSet("secret")  # the shared-secret steps every family answers (``fedpgm.federation.runtime``)


@HANDLERS.query("secret_nonce", NOTHING)
def nonce(request: Message, ctx: ClientContext) -> Message:
    """A party: a fresh nonce, which the dealer's signature must cover (once per run)."""
    identity_of(ctx)
    if NONCE in ctx.state:
        raise PolicyRefusal(f"client '{ctx.client_id}' draws one secret nonce per run")
    ctx.state[NONCE] = np.frombuffer(os.urandom(16), np.uint8).copy()
    return Message("secret_nonce", {"nonce": ctx.state[NONCE]})


@HANDLERS.query("secret_deal", Contract({"parties": ListOf(Text(), 1024, unique=True)}, required=("parties",),
                                       arrays={"nonces": Array("u", 16 * 1024)}))
def deal(request: Message, ctx: ClientContext) -> Message:
    """Dealer: a fresh key, sealed for each of ``parties`` and signed with that party's nonce
    (``nonces``: (parties, 16)) and the list of all parties, this one first."""
    me = identity_of(ctx)
    parties = list(request.config["parties"])
    nonces = request.arrays.get("nonces", np.zeros((0, 16), np.uint8))
    if ctx.client_id in parties or not parties:
        raise PolicyRefusal(f"client '{ctx.client_id}' deals to at least one other party, not to itself")
    if nonces.shape != (len(parties), 16):
        raise PolicyRefusal(f"client '{ctx.client_id}' deals only with one 16-byte nonce per party, got an "
                            f"array of shape {nonces.shape} for {len(parties)} parties")
    everyone = [ctx.client_id, *parties]
    for p in parties:
        me.public(p)  # (on the roster)
    key = os.urandom(32)
    out = {}
    for p, n in zip(parties, nonces):
        out[f"sealed/{p}"] = me.seal(p, key)
        out[f"signature/{p}"] = me.sign("secret_deal", p, out[f"sealed/{p}"], n, "\x00".join(everyone))
    keep_once(ctx, key, everyone)
    return Message("secret_deal", out)


@HANDLERS.query("secret_take", Contract({"parties": ListOf(Text(), 1024, unique=True)}, required=("parties",),
                                       arrays={"sealed": Array("u", 256), "signature": Array("u", 64)}))
def take(request: Message, ctx: ClientContext) -> Message:
    """A party: the dealer's key (the first of ``parties``), only from a copy the dealer signed for
    this party, its nonce of this run and these parties."""
    me, everyone = identity_of(ctx), list(request.config["parties"])
    if len(everyone) < 2 or ctx.client_id not in everyone[1:] or NONCE not in ctx.state:
        raise PolicyRefusal(f"client '{ctx.client_id}' takes a key only as one of the parties after the "
                            "dealer, with a nonce it drew this run")
    dealer = everyone[0]
    me.verify(dealer, request.arrays["signature"], "secret_deal", ctx.client_id, request.arrays["sealed"],
              ctx.state[NONCE], "\x00".join(everyone))
    keep_once(ctx, me.open(dealer, request.arrays["sealed"]), everyone)
    return Message("secret_take", config={"kept": True})


def share_secret(fed, parties: list[str]) -> None:
    """Give ``parties`` (at least 2) one key the coordinator does not learn; the first deals."""
    if len(parties) < 2:
        raise FedpgmError(f"a shared secret needs at least 2 parties, got {parties}")
    dealer, others = parties[0], parties[1:]
    nonces = fed.broadcast("secret_nonce", clients=others).require_all()
    stacked = np.stack([nonces[p].arrays["nonce"] for p in others]).astype(np.uint8)
    dealt = fed.send(dealer, "secret_deal", {"nonces": stacked}, {"parties": others}).require_all()[dealer]
    per = {p: ({"sealed": dealt.arrays[f"sealed/{p}"], "signature": dealt.arrays[f"signature/{p}"]},
               {"parties": parties}) for p in others}
    fed.broadcast("secret_take", clients=others, per_client=per).require_all()


def keyed_hashes(ctx: ClientContext, texts) -> np.ndarray:
    """(n,) uint64 keyed hashes (BLAKE2b, 8 bytes) of ``texts`` under the run's shared secret."""
    if SECRET not in ctx.state:
        raise PolicyRefusal(f"client '{ctx.client_id}' matches rows only by a key the parties share, and holds "
                            "none in this run; the server must run share_secret first")
    key = np.asarray(ctx.state[SECRET], np.uint8).tobytes()
    return np.array([int.from_bytes(hashlib.blake2b(t.encode(), key=key, digest_size=8).digest(), "little")
                     for t in texts], dtype=np.uint64)


def row_tokens(ctx: ClientContext, ids) -> np.ndarray:
    """(rows,) uint64 keyed hashes of row ``ids`` under the run's shared secret."""
    return keyed_hashes(ctx, (f"row\x00{i}" for i in ids))


def cancelling_masks(ctx: ClientContext, tokens: np.ndarray, binding: bytes) -> np.ndarray:
    """(rows,) uint64 masks of this party for rows ``tokens``: for each other party b this run's
    secret was dealt to, plus the keyed hash of (this party, b, ``binding``, token) where this
    party's id sorts first, minus that of (b, this party, ``binding``, token) where b's does (mod
    2**64). The masks of all the parties for one token sum to 0 where every party was given the
    same ``binding`` (a digest of the request: rows, weights), and any one party's masked values
    are uniform to whoever lacks the key (the coordinator)."""
    me, tag = ctx.client_id, binding.hex()
    out = np.zeros(len(tokens), dtype=np.uint64)
    for other in ctx.state[PARTIES]:
        if other == me:
            continue
        first, second = sorted((me, other))
        mask = keyed_hashes(ctx, (f"mask\x00{first}\x00{second}\x00{tag}\x00{t}" for t in tokens.tolist()))
        out = out + mask if me == first else out - mask  # (uint64: wraps mod 2**64)
    return out

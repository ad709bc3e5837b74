"""A client's checks around Flower's SecAgg+ client mod, so that a malicious coordinator cannot
open one client's vector from a secure sum (``guarded_secaggplus``).

Flower 1.41's ``secaggplus_mod`` is secure against an honest-but-curious server only: it takes
the protocol's parameters from the server and, in the unmask stage, reveals for every node the
server lists as active its share of that node's private mask seed and for every node listed as
dropped its share of that node's masking key, without checking the lists. A server that lists a
node as both, or gives different nodes different lists, or withholds some partners' shares from
a node, collects a seed and the masking keys that open one node's vector alone
(``tests/security/test_secure_sum_hostile.py``). The server may also run the sum with nodes of
its own, or send each client a different request (a different model, total or sparsity) so that
the others' addends are ones it knows.

Each client therefore checks, before Flower's mod runs a stage:

- **any message**: only the stages of a SecAgg+ sum, of type ``train``, reach the route, and the
  route computes only inside the collect stage (Flower's mod hands any other type, such as
  ``train.default``, which Flower routes to the same function, to the route unmasked).
- **setup**: the quantization is fedpgm's (``CLIP``, ``QUANTIZATION``, ``MODULUS``, weight 1),
  not the server's; every sampled node shares with every other; at least the policy's
  ``min_cohort`` nodes; the reconstruction threshold is every share, so a member's seed is
  rebuilt only if every member unmasks the sum, and no coalition short of all members rebuilds
  a masking key. The node signs its two fresh SecAgg+ public keys with its party key
  (``fedpgm.federation.identity``) and the server relays the signatures.
- **share keys**: every neighbour's public keys are signed by a distinct party on the roster
  (no node of the coordinator's own gets a share), at least ``min_cohort`` of them; with the
  policy's ``secure_whole_roster``, every party of the roster.
- **collect** (the request itself): shares came from every neighbour, once each; the node signs
  a digest of the request it was sent (all of it but its own name: the model, the round's total
  rows and cohort, every setting), the list of members it was told of, and the groups of the sum
  it filled (``filled_groups``: F-CM's modules).
- **unmask**: every member is listed active, once, and none dropped, so a node gives out shares of
  the members' mask seeds only, never of their masking keys (with which, beside a seed, a server
  opens one member's vector: Flower's mod gives both for a node listed active and dropped, and
  lists that differ from node to node do it too); every member signed the same request digest
  and member list as this node's; with ``require_secure_aggregation``, each group this node
  filled was filled by ``min_cohort`` members; a node unmasks one sum of a request per run. As a sum opens
  only if all its members unmask it, two opened sums of one request have no member in common, so
  no difference of them is one member's vector. Anything else: no share leaves. A member that
  drops out before the unmask therefore fails the sum, and the server starts a new one among the
  members left (``fedpgm.federation.secagg``), whose masks share nothing with the old; one that
  drops out during the unmask fails the round.

A client without a party identity (no roster) makes the checks that need none. Why by hand:
Flower's mod has no hook for these checks, and the checks are fedpgm's policy, not SecAgg+'s.
"""

from __future__ import annotations

import json
import logging
from typing import Callable, cast

import numpy as np
from flwr.app import ConfigRecord, Context, MessageType
from flwr.app import Message as FlowerMessage
from flwr.client.mod import secaggplus_mod
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
import flwr.compat.common.recorddict_compat as compat
from flwr.common import parameters_to_ndarrays

from fedpgm.data.policy import ClientPolicy, PolicyRefusal
from fedpgm.federation.codec import CodecError, Message, decode
from fedpgm.federation.identity import Identity, digest

CLIP = 8.0  # every value a client adds lies in [-CLIP, CLIP]
QUANTIZATION = 1 << 22  # levels over [-CLIP, CLIP]
MODULUS = 1 << 32  # the masked sum's modulus
REQUEST = "fedpgm-request"  # FitIns config: the fedpgm request (codec bytes)
ATTEST = "fedpgm-attest"  # reply: this node's signature; request: {node id: [party, signature hex]}
PARTY = "fedpgm-party"  # reply: this node's party (client id)
GROUPS = "fedpgm-groups"  # reply (collect): the groups of the vector this node filled, JSON
STATE = "fedpgm-secagg"  # the node's record: the sum's threshold, neighbours' parties and keys; requests added

Party = Callable[[Context], tuple[str, ClientPolicy, Identity | None]]


def secure_request(raw: bytes) -> Message:
    """The fedpgm request inside a SecAgg+ collect message (codec bytes)."""
    try:
        return decode(raw)
    except CodecError as e:
        raise PolicyRefusal(f"a secure-sum request that does not decode ({e})") from None


def request_digest(request: Message) -> bytes:
    """SHA-256 (``identity.digest``: length-prefixed parts) of a secure-sum request without the
    recipient's name: every member of an honest sum was sent the same."""
    config = {k: v for k, v in request.config.items() if k != "client"}
    parts: list = ["secagg-request", request.name, json.dumps(config, sort_keys=True)]
    for name in sorted(request.arrays):
        a = np.ascontiguousarray(request.arrays[name])
        parts += [name, a.dtype.str, json.dumps(a.shape), np.frombuffer(a.tobytes(), np.uint8)]
    return digest(*parts)


def filled_groups(order: list, arrays: list[np.ndarray]) -> list[str]:
    """The groups of a share (``order`` names its arrays) its member filled: ``g`` where the share
    holds a non-zero ``weight/g`` (``fedpgm.federation.shares``: an F-CM module it trained), or
    ``*`` (all of it) where the share has no groups."""
    named = [(str(n)[len("weight/"):], a) for n, a in zip(order, arrays) if str(n).startswith("weight/")]
    return sorted(g for g, a in named if np.any(a != 0)) if named else ["*"]


def guarded_secaggplus(party: Party):
    """Flower's ``secaggplus_mod`` behind this module's checks; ``party(context)`` gives the
    node's client id, policy and identity (None without a roster)."""

    def mod(msg: FlowerMessage, context: Context, call_next) -> FlowerMessage:
        client, policy, identity = party(context)
        configs = msg.content.config_records.get(RECORD_KEY_CONFIGS) if msg.has_content() else None
        if msg.metadata.message_type != MessageType.TRAIN or configs is None or Key.STAGE not in configs:
            # (Flower's mod passes any other type, e.g. "train.default", to the route unmasked)
            raise PolicyRefusal(f"client '{client}' answers its secure-sum route only as a stage of a SecAgg+ "
                                f"sum, not a '{msg.metadata.message_type}' message without one")
        guard = Guard(client, policy, identity, context, msg.metadata.dst_node_id)
        stage = str(configs[Key.STAGE])
        relayed = str(configs.pop(ATTEST, "{}"))
        if stage == Stage.SETUP:
            guard.setup(configs)
        elif stage == Stage.SHARE_KEYS:
            guard.share_keys(configs, relayed)
        elif stage == Stage.COLLECT_MASKED_VECTORS:
            request = secure_request(cast(bytes, compat.recorddict_to_fitins(msg.content, keep_input=True)
                                          .config.get(REQUEST, b"")))
            guard.collect(configs, request_digest(request))
        elif stage == Stage.UNMASK:
            guard.unmask(configs, relayed)

        def masked_only(m: FlowerMessage, ctx: Context) -> FlowerMessage:  # the route runs in collect only
            if stage != Stage.COLLECT_MASKED_VECTORS:
                raise PolicyRefusal(f"client '{client}' computes a secure-sum share only to mask it")
            try:
                share = call_next(m, ctx)
                arrays = parameters_to_ndarrays(compat.recorddict_to_fitres(share.content, keep_input=True).parameters)
                guard.record["groups"] = json.dumps(filled_groups(request.config.get("secure_order", []), arrays))
                return share
            except Exception as e:  # the reason stays here: its text could carry the share's values
                logging.getLogger("fedpgm").warning("client '%s' left a secure sum: %s", client, e)
                raise PolicyRefusal(f"client '{client}' does not add to this secure sum (its reason is in its "
                                    "own log)") from None

        reply = secaggplus_mod(msg, context, masked_only)
        out = reply.content.config_records[RECORD_KEY_CONFIGS]
        if stage == Stage.SETUP:
            guard.record["pk"] = json.dumps([cast(bytes, out[k]).hex() for k in (Key.PUBLIC_KEY_1, Key.PUBLIC_KEY_2)])
        guard.attest(stage, out)
        context.state.config_records[STATE] = ConfigRecord(dict(guard.record))
        return reply

    return mod


class Guard:
    """One node's checks of one stage, and its record of the sum so far."""

    def __init__(self, client: str, policy: ClientPolicy, identity: Identity | None, context: Context,
                 node: int) -> None:
        self.client, self.policy, self.identity, self.node = client, policy, identity, node
        self.run = str(context.run_id)
        self.record = {k: str(v) for k, v in context.state.config_records.get(STATE, ConfigRecord({})).items()}

    def refuse(self, why: str) -> PolicyRefusal:
        return PolicyRefusal(f"client '{self.client}' refuses a secure sum: {why}")

    def signed(self, relayed: str, nid: int) -> tuple[str, np.ndarray, list]:
        """The party, signature and what else was signed that the server relayed for node ``nid``;
        refused if there is none."""
        try:
            party, signature, *more = json.loads(relayed)[str(nid)]
            return str(party), np.frombuffer(bytes.fromhex(str(signature)), np.uint8), more
        except (ValueError, KeyError, TypeError, AttributeError):
            raise self.refuse(f"node {nid}'s message is signed by no party on its roster") from None

    def setup(self, configs) -> None:
        added = self.record.get("added", "[]")
        self.record = {"added": added}
        fixed = {Key.CLIPPING_RANGE: CLIP, Key.TARGET_RANGE: QUANTIZATION, Key.MOD_RANGE: MODULUS,
                 Key.MAX_WEIGHT: 1.0}
        for key, value in fixed.items():
            if configs.get(key) != value:
                raise self.refuse(f"its '{key}' is fedpgm's {value}, not the server's {configs.get(key)!r}")
        sampled, shares, threshold = (int(configs[k]) for k in (Key.SAMPLE_NUMBER, Key.SHARE_NUMBER, Key.THRESHOLD))
        if sampled < max(2, self.policy.min_cohort):
            raise self.refuse(f"{sampled} node(s), fewer than its policy's min_cohort {self.policy.min_cohort}")
        if shares != sampled:
            raise self.refuse(f"every node shares with every other ({sampled}), not with {shares}")
        if threshold != shares:
            raise self.refuse(f"a reconstruction threshold of {threshold} of {shares} shares: a node's seed needs "
                              "every member's share, so that a sum opens only if every member unmasks it")
        self.record.update(threshold=str(threshold), parties="{}", keys="{}")

    def share_keys(self, configs, relayed: str) -> None:
        if "threshold" not in self.record:
            raise self.refuse("keys shared before a setup it accepted")
        keys = {int(k): (bytes(v[0]), bytes(v[1])) for k, v in configs.items() if k != Key.STAGE}
        if self.node not in keys:
            raise self.refuse("its own keys are not among the neighbours'")
        if len(keys) < max(int(self.record["threshold"]), self.policy.min_cohort):
            raise self.refuse(f"{len(keys)} neighbour(s), fewer than the threshold or min_cohort")
        parties: dict[int, str] = {}
        if self.identity is not None:
            for nid, (pk1, pk2) in keys.items():
                party, signature, _ = self.signed(relayed, nid)
                self.identity.verify(party, signature, *self.keys_statement(nid, pk1, pk2))
                parties[nid] = party
            if len(set(parties.values())) != len(parties) or parties[self.node] != self.client:
                raise self.refuse("one party signs for two nodes, or another party for this node")
            if self.policy.secure_whole_roster and set(parties.values()) != set(self.identity.roster):
                missing = sorted(set(self.identity.roster) - set(parties.values()))
                raise self.refuse(f"its policy adds only to sums of the whole roster; {missing} are not members")
        self.record.update(parties=json.dumps({str(k): v for k, v in parties.items()}),
                           keys=json.dumps({str(k): v[0].hex() for k, v in keys.items()}))

    def collect(self, configs, request: bytes) -> None:
        """Before this node adds its vector: shares came from every neighbour, once each (a node
        masked with fewer is one whose partners' keys could be asked for)."""
        neighbours = {int(k) for k in json.loads(self.record.get("keys", "{}"))} - {self.node}
        sources = [int(x) for x in configs.get(Key.SOURCE_LIST, [])]
        if "threshold" not in self.record or len(sources) != len(set(sources)) or set(sources) != neighbours:
            raise self.refuse("its shares must come from every neighbour it shared keys with, once each")
        self.record["digest"] = request.hex()

    def unmask(self, configs, relayed: str) -> None:
        """Before this node gives out its shares of the members' mask seeds (never of their keys)."""
        if "digest" not in self.record:
            raise self.refuse("asked to unmask before it added a vector")
        active, dead = (list(configs.get(k, [])) for k in (Key.ACTIVE_NODE_ID_LIST, Key.DEAD_NODE_ID_LIST))
        members = {int(k) for k in json.loads(self.record["keys"])}
        if dead or len(set(active)) != len(active) or set(active) != members:
            raise self.refuse("it unmasks only a sum that every member added to, each listed once and none "
                              "as dropped (a dropped node's key shares would open a member's vector)")
        added = json.loads(self.record.get("added", "[]"))
        if self.record["digest"] in added:
            raise self.refuse("it unmasks one sum of a request, once per run (two sums of one request that "
                              "differ by one member give that member's vector)")
        if self.identity is not None:
            parties, keys = json.loads(self.record["parties"]), json.loads(self.record["keys"])
            mine = bytes.fromhex(self.record["digest"])
            filled = []
            for nid in active:
                party, signature, more = self.signed(relayed, nid)
                if party != parties[str(nid)] or len(more) != 1 or not isinstance(more[0], str):
                    raise self.refuse(f"node {nid} is party '{parties[str(nid)]}', not '{party}', or sent no groups")
                groups = json.loads(more[0]) if more[0].startswith("[") else None
                try:
                    if not isinstance(groups, list):
                        raise PolicyRefusal("groups")
                    self.identity.verify(party, signature, *self.request_statement(
                        nid, bytes.fromhex(keys[str(nid)]), mine, members, groups))
                except PolicyRefusal:
                    raise self.refuse(f"node {nid} ('{party}') did not sign the request and the members this node "
                                      "was sent: members were sent different models, settings or members") from None
                filled.append(set(map(str, groups)))
            self.check_groups(filled)
        self.record["added"] = json.dumps(added + [self.record["digest"]])

    def check_groups(self, filled: list[set[str]]) -> None:
        """With ``require_secure_aggregation``: every group this node filled (an F-CM module it
        trained) is filled by at least ``min_cohort`` members, else that group's sum is one
        member's update (``*``: a member filled every group)."""
        if not self.policy.require_secure_aggregation:
            return
        for group in sorted(set(json.loads(self.record["groups"])) - {"*"}):
            count = sum(1 for f in filled if group in f or "*" in f)
            if count < self.policy.min_cohort:
                raise self.refuse(f"its group '{group}' is filled by {count} member(s), fewer than its policy's "
                                  f"min_cohort {self.policy.min_cohort}: that group's sum would be one update")

    def attest(self, stage: str, out) -> None:
        """Sign this node's keys (setup) or its request (collect) into the reply ``out``."""
        if self.identity is None or stage not in (Stage.SETUP, Stage.COLLECT_MASKED_VECTORS):
            return
        pk1, pk2 = (bytes.fromhex(k) for k in json.loads(str(self.record["pk"])))
        parts = (self.keys_statement(self.node, pk1, pk2) if stage == Stage.SETUP else
                 self.request_statement(self.node, pk1, bytes.fromhex(self.record["digest"]),
                                        {int(k) for k in json.loads(self.record["keys"])},
                                        json.loads(self.record["groups"])))
        out[PARTY] = self.client
        out[ATTEST] = bytes(self.identity.sign(*parts)).hex()
        if stage == Stage.COLLECT_MASKED_VECTORS:
            out[GROUPS] = self.record["groups"]

    def keys_statement(self, nid: int, pk1: bytes, pk2: bytes) -> tuple:
        return ("secagg-keys", self.run, str(nid), np.frombuffer(pk1, np.uint8), np.frombuffer(pk2, np.uint8))

    def request_statement(self, nid: int, pk1: bytes, digest: bytes, members: set[int], groups: list) -> tuple:
        return ("secagg-request", self.run, str(nid), np.frombuffer(pk1, np.uint8), np.frombuffer(digest, np.uint8),
                json.dumps(sorted(members)), json.dumps(sorted(map(str, groups))))

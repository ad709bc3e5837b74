"""A malicious coordinator against SecAgg+ (item 9 and its variants): Flower's own client mod
gives one client's vector away to a server that lists it both active and dropped; behind the
client's checks (``fedpgm.federation.secagg_guard``) that and the other server lies get no share.

Everything runs in-process: the real ``SecAggPlusWorkflow`` and fedpgm's ``secure_sum`` on the
server side, the real mods and fedpgm's ``client_reply`` on each node, with a grid that hands each
message (copied, as the wire would) to its node, and a hostile grid that rewrites messages."""

import copy
import json
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.common.secure_aggregation.crypto.shamir import combine_shares
from flwr.common.secure_aggregation.quantization import dequantize
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.crypto.symmetric_encryption import generate_shared_key
from flwr.supercore.primitives.asymmetric import bytes_to_private_key, bytes_to_public_key
from flwr.supercore.task_identity import TaskIdentity

from fedpgm.data.policy import ClientPolicy
from fedpgm.errors import FedpgmError
from fedpgm.federation.codec import Message as FedMessage
from fedpgm.federation.identity import Identity
from fedpgm.federation.ledger import Ledger
from fedpgm.federation.secagg import secure_sum, client_reply
from fedpgm.federation.secagg_guard import CLIP, MODULUS, QUANTIZATION, guarded_secaggplus

VECTORS = {"client-0": [0.5, -1.25, 3.0], "client-1": [1.0, 2.0, -0.75], "client-2": [0.125, 0.25, 7.5],
           "client-3": [-2.0, 0.5, 1.5]}
STEP = 2 * CLIP / QUANTIZATION  # one quantization level


class Node:
    """One SuperNode: its context, its mod (Flower's alone, or behind fedpgm's checks) and a
    ``contribute`` handler that adds the vector the request names for it."""

    def __init__(self, client: str, nid: int, identity: Identity | None, guarded: bool, policy: ClientPolicy):
        self.client, self.refusals = client, []
        self.context = Context(run_id=7, node_id=nid, node_config={}, state=RecordDict(), run_config={})
        self.mod = guarded_secaggplus(lambda ctx: (client, policy, identity)) if guarded else secaggplus_mod

    def handle(self, msg: Message) -> Message:
        def call_next(m, ctx):
            return client_reply(m, lambda request: FedMessage("contribute", {"v": request.arrays[f"v/{self.client}"]}))
        try:
            return self.mod(msg, self.context, call_next)
        except Exception as e:  # a node's failure reaches the server as an error reply
            self.refusals.append(str(e))
            from flwr.app import Error
            return Message(Error(code=0, reason=str(e)), reply_to=msg)


class LocalGrid:
    """Routes each message, copied as the wire would, to its node; ``tamper(stage, nid, configs)``
    lets a hostile server rewrite what it sends."""

    def __init__(self, nodes: dict[int, Node], tamper=None):
        self.nodes, self.tamper = nodes, tamper
        self.replies: dict[str, dict[int, dict]] = {}  # stage -> node -> reply configs

    def send_and_receive(self, messages, *, timeout=None):
        out = []
        for m in messages:
            content = copy.deepcopy(m.content)
            configs = content.config_records[RECORD_KEY_CONFIGS]
            stage, nid = str(configs[Key.STAGE]), m.metadata.dst_node_id
            if self.tamper:
                self.tamper(stage, nid, configs)
            reply = self.nodes[nid].handle(Message(content, dst_node_id=nid, message_type=m.metadata.message_type,
                                                   group_id=m.metadata.group_id))
            if reply.has_content():
                self.replies.setdefault(stage, {})[nid] = dict(reply.content.config_records[RECORD_KEY_CONFIGS])
            out.append(reply)
        return out


def federation(clients: list[str], guarded: bool = True, tamper=None, sybil: str | None = None,
               policy: ClientPolicy | None = None):
    """A federation object as ``secure_sum`` needs it, over in-process nodes (node ids 101, 102, ...);
    ``sybil``: a node of the server's own under that name, with keys no roster holds."""
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 7, 0, 0
    identities = Identity.generate([c for c in clients if c != sybil])
    if sybil:
        identities[sybil] = None
    node_of = {c: 101 + i for i, c in enumerate(clients)}
    nodes = {node_of[c]: Node(c, node_of[c], identities[c], guarded, policy or ClientPolicy()) for c in clients}
    grid = LocalGrid(nodes, tamper)
    fed = SimpleNamespace(node_of=node_of, grid=grid, ledger=Ledger(), log=lambda text: None, left_out={},
                          secagg_view={})
    return fed, nodes


def run(fed, clients: list[str], configs: dict[str, dict] | None = None):
    arrays = {f"v/{c}": np.asarray(v) for c, v in VECTORS.items() if c in clients}
    requests = {c: (arrays, (configs or {}).get(c, {"round": 1})) for c in clients}
    context = Context(run_id=7, node_id=0, node_config={}, state=RecordDict(), run_config={})
    return secure_sum(fed, context, "contribute", ["v"], requests)


def refusals(nodes) -> str:
    return " | ".join(r for n in nodes.values() for r in n.refusals)


def test_an_honest_secure_sum_in_process_is_exact_and_every_node_signed_it():
    clients = ["client-0", "client-1", "client-2"]
    fed, nodes = federation(clients)
    sums, replies = run(fed, clients)
    np.testing.assert_allclose(sums[0], np.sum([VECTORS[c] for c in clients], axis=0), atol=3 * STEP)
    assert sorted(replies) == clients and not refusals(nodes) and fed.secagg_signers == clients
    # what the server saw of each vector: uniform draws mod 2^32, far from the quantized values
    for c, (_, vector) in fed.secagg_view.items():
        plain = np.round((np.asarray(VECTORS[c]) + CLIP) / STEP)
        assert np.abs(vector - plain).min() > 1000


def both_secrets_attack(nodes, grid, victim: int, n_values: int) -> np.ndarray | None:
    """The server's reconstruction of ``victim``'s vector alone from unmask replies that revealed
    both its mask seed share and its key share; None if too few of either came back."""
    seed_shares, key_shares = [], []
    for reply in grid.replies.get(Stage.UNMASK, {}).values():
        owners, shares = list(reply[Key.NODE_ID_LIST]), list(reply[Key.SHARE_LIST])
        mine = [s for o, s in zip(owners, shares) if o == victim]
        if len(mine) == 2:
            seed_shares.append(mine[0])
            key_shares.append(mine[1])
    if len(seed_shares) < 2:
        return None
    seed, sk1 = combine_shares(seed_shares), combine_shares(key_shares)
    public = {nid: bytes(r[Key.PUBLIC_KEY_1]) for nid, r in grid.replies[Stage.SETUP].items()}
    masked = [bytes_to_ndarray(b) for b in grid.replies[Stage.COLLECT_MASKED_VECTORS][victim][Key.MASKED_PARAMETERS]]
    shapes = [a.shape for a in masked]
    vector = [(a - m) % MODULUS for a, m in zip(masked, pseudo_rand_gen(seed, MODULUS, shapes))]
    for nid, pk1 in public.items():
        if nid != victim:
            pair = pseudo_rand_gen(generate_shared_key(bytes_to_private_key(sk1), bytes_to_public_key(pk1)),
                                   MODULUS, shapes)
            vector = [(v - p if victim > nid else v + p) % MODULUS for v, p in zip(vector, pair)]
    return dequantize(vector[1:], CLIP, QUANTIZATION)[0][:n_values]


def listed_twice(victim: int):
    def tamper(stage, nid, configs):
        if stage == Stage.UNMASK:  # the victim "active" for its seed, "dropped" for its key
            configs[Key.DEAD_NODE_ID_LIST] = [victim]
    return tamper


def test_flowers_own_mod_gives_a_node_listed_active_and_dropped_away_and_fedpgms_checks_do_not():
    clients = ["client-0", "client-1", "client-2"]
    for guarded in (False, True):
        fed, nodes = federation(clients, guarded=guarded, tamper=listed_twice(101))
        try:  # (Flower's own unmasking trips over the doubled shares; the attacker's does not)
            run(fed, clients)
        except (FedpgmError, ValueError):
            pass
        stolen = both_secrets_attack(nodes, fed.grid, 101, 3)
        if not guarded:  # Flower alone: client-0's vector, read on its own
            np.testing.assert_allclose(stolen, VECTORS["client-0"], atol=STEP)
        else:
            assert stolen is None
            assert "both active and dropped" in refusals(nodes)
            assert not any(Key.SHARE_LIST in r for r in fed.grid.replies.get(Stage.UNMASK, {}).values())


def test_a_server_sending_members_different_requests_gets_no_share():
    """The victim is told the round's total is its own rows plus the floor, the others a huge one, so
    their addends would vanish: every node sees another signed a different request and unmasks nothing."""
    clients = ["client-0", "client-1", "client-2"]
    fed, nodes = federation(clients)
    configs = {c: {"round": 1 if c == "client-0" else 2} for c in clients}
    with pytest.raises(FedpgmError, match="did not complete"):
        run(fed, clients, configs)
    assert "did not sign the request this node was sent" in refusals(nodes)
    assert not any(Key.SHARE_LIST in r for r in fed.grid.replies.get(Stage.UNMASK, {}).values())


def test_a_node_of_the_servers_own_gets_no_share():
    clients = ["client-0", "client-1", "sybil"]
    fed, nodes = federation(clients, sybil="sybil")
    with pytest.raises(FedpgmError):
        run(fed, clients)
    assert "signed by no party on its roster" in refusals(nodes)
    assert Stage.COLLECT_MASKED_VECTORS not in fed.grid.replies  # no honest node got to add its vector


@pytest.mark.parametrize("key, value, words", [
    (Key.THRESHOLD, 2, "not a strict majority"),  # 4 nodes, threshold 2: two disjoint halves
    (Key.CLIPPING_RANGE, 1e6, "fedpgm's 8.0"),  # others' values quantized away
    (Key.MAX_WEIGHT, 1e-6, "fedpgm's 1.0"),
    (Key.SAMPLE_NUMBER, 1, "min_cohort"),
])
def test_protocol_parameters_are_fedpgms_not_the_servers(key, value, words):
    clients = ["client-0", "client-1", "client-2", "client-3"]

    def tamper(stage, nid, configs):
        if stage == Stage.SETUP:
            configs[key] = value
            if key == Key.SAMPLE_NUMBER:
                configs[Key.SHARE_NUMBER] = value
    fed, nodes = federation(clients, tamper=tamper)
    with pytest.raises(FedpgmError):
        run(fed, clients)
    assert words in refusals(nodes)
    assert Stage.SHARE_KEYS not in fed.grid.replies


def test_unmask_needs_the_policys_cohort_and_only_neighbours():
    clients = ["client-0", "client-1", "client-2", "client-3"]
    for active, words in (([101, 102, 103, 999], "shares no keys"), ([101, 102, 103, 103], "listed twice")):
        def tamper(stage, nid, configs, active=active):
            if stage == Stage.UNMASK:
                configs[Key.ACTIVE_NODE_ID_LIST] = active
        fed, nodes = federation(clients, tamper=tamper)
        with pytest.raises(FedpgmError):
            run(fed, clients)
        assert words in refusals(nodes)
    fed, nodes = federation(clients, policy=ClientPolicy(min_cohort=5))
    with pytest.raises(FedpgmError):
        run(fed, clients)
    assert "fewer than its policy's min_cohort 5" in refusals(nodes)


def test_the_relay_cannot_swap_a_nodes_signature():
    clients = ["client-0", "client-1", "client-2"]

    def tamper(stage, nid, configs):
        if stage == Stage.SHARE_KEYS:
            signed = json.loads(configs["fedpgm-attest"])
            signed["101"], signed["102"] = signed["102"], signed["101"]
            configs["fedpgm-attest"] = json.dumps(signed)
    fed, nodes = federation(clients, tamper=tamper)
    with pytest.raises(FedpgmError):
        run(fed, clients)
    assert "signature does not verify" in refusals(nodes)

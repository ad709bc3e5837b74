"""A malicious coordinator against SecAgg+ (item 9 and its variants): Flower's own client mod
gives one client's vector away to a server that lists it both active and dropped; behind the
client's checks (``fedpgm.federation.secagg_guard``) that and the other server lies get no share.

Everything runs in-process: the real ``SecAggPlusWorkflow`` and fedpgm's ``secure_sum`` on the
server side, the real mods and fedpgm's ``client_reply`` on each node, with a grid that hands each
message (copied, as the wire would) to its node, and a hostile grid that rewrites messages
(``fedpgm.federation.secagg_local``)."""

import json

import numpy as np
import pytest
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.crypto.shamir import combine_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import generate_shared_key
from flwr.common.secure_aggregation.quantization import dequantize
from flwr.common.secure_aggregation.secaggplus_constants import Key, Stage
from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
from flwr.supercore.primitives.asymmetric import bytes_to_private_key, bytes_to_public_key

from fedpgm.data.policy import ClientPolicy
from fedpgm.errors import FedpgmError
from fedpgm.federation.secagg_guard import CLIP, MODULUS, QUANTIZATION
from fedpgm.federation.secagg_local import local_federation, local_secure_sum

VECTORS = {"client-0": [0.5, -1.25, 3.0], "client-1": [1.0, 2.0, -0.75], "client-2": [0.125, 0.25, 7.5],
           "client-3": [-2.0, 0.5, 1.5], "client-4": [0.75, -0.5, 2.0]}
STEP = 2 * CLIP / QUANTIZATION  # one quantization level


def federation(clients: list[str], **kw):
    return local_federation(clients, **kw)


def run(fed, clients: list[str], configs: dict[str, dict] | None = None):
    return local_secure_sum(fed, {c: VECTORS.get(c, [0.0, 0.0, 0.0]) for c in clients}, configs)


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
            assert "none as dropped" in refusals(nodes)
            assert not any(Key.SHARE_LIST in r for r in fed.grid.replies.get(Stage.UNMASK, {}).values())


def test_a_server_sending_members_different_requests_gets_no_share():
    """The victim is told the round's total is its own rows plus the floor, the others a huge one, so
    their addends would vanish: every node sees another signed a different request and unmasks nothing."""
    clients = ["client-0", "client-1", "client-2"]
    fed, nodes = federation(clients)
    configs = {c: {"round": 1 if c == "client-0" else 2} for c in clients}
    with pytest.raises(FedpgmError, match="did not complete"):
        run(fed, clients, configs)
    assert "did not sign the request and the members this node was sent" in refusals(nodes)
    assert not any(Key.SHARE_LIST in r for r in fed.grid.replies.get(Stage.UNMASK, {}).values())


def test_a_node_of_the_servers_own_gets_no_share():
    clients = ["client-0", "client-1", "sybil"]
    fed, nodes = federation(clients, outsider="sybil")
    with pytest.raises(FedpgmError):
        run(fed, clients)
    assert "signed by no party on its roster" in refusals(nodes)
    assert Stage.COLLECT_MASKED_VECTORS not in fed.grid.replies  # no honest node got to add its vector


@pytest.mark.parametrize("key, value, words", [
    (Key.THRESHOLD, 3, "needs every member's share"),  # 3 of 4: a sum opened without one member
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


def test_unmask_needs_every_member_once_and_the_policys_cohort():
    clients = ["client-0", "client-1", "client-2", "client-3"]
    for active in ([101, 102, 103, 999], [101, 102, 103, 103], [101, 102, 103]):
        def tamper(stage, nid, configs, active=active):
            if stage == Stage.UNMASK:
                configs[Key.ACTIVE_NODE_ID_LIST] = active
        fed, nodes = federation(clients, tamper=tamper)
        with pytest.raises(FedpgmError):
            run(fed, clients)
        assert "every member added to, each listed once" in refusals(nodes)
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


def test_a_second_sum_of_the_same_request_without_one_member_gets_nothing():
    """Differencing: the sum over {0, 1, 2}, then the same request over {0, 1}, would give client-2's
    vector; a node adds to one sum of a request per run. A new request is answered."""
    clients = ["client-0", "client-1", "client-2"]
    fed, nodes = federation(clients)
    first, _ = run(fed, clients)
    with pytest.raises(FedpgmError, match="did not complete"):
        local_secure_sum(fed, {c: VECTORS[c] for c in clients}, members=clients[:2])
    assert "once per run" in refusals(nodes)
    again, _ = run(fed, clients, {c: {"round": 2} for c in clients})
    np.testing.assert_allclose(again[0], first[0], atol=6 * STEP)


def test_a_member_that_drops_out_fails_the_sum_and_a_new_one_runs_among_the_rest():
    clients = ["client-0", "client-1", "client-2"]
    fed, nodes = federation(clients)
    sums, replies = run(fed, clients, {c: {"fail": ["client-1"]} for c in clients})
    np.testing.assert_allclose(sums[0], np.add(VECTORS["client-0"], VECTORS["client-2"]), atol=2 * STEP)
    assert sorted(replies) == ["client-0", "client-2"] and sorted(fed.left_out) == ["client-1"]
    assert fed.secagg_signers == ["client-0", "client-2"]
    assert "does not add to this secure sum" in refusals(nodes)  # (its reason stays in its own log)


def test_shares_withheld_from_a_member_or_lists_that_differ_by_node_give_no_key_share():
    """The review's attacks on the first version of the checks: the victim gets share ciphertexts
    from too few partners (then the partners are listed dropped where their key shares are held),
    or each node gets its own active/dropped lists; both opened one vector with 5 nodes."""
    clients = [f"client-{i}" for i in range(5)]

    def withhold(stage, nid, configs):
        if stage == Stage.COLLECT_MASKED_VECTORS and nid == 101:
            configs[Key.CIPHERTEXT_LIST] = list(configs[Key.CIPHERTEXT_LIST])[:2]
            configs[Key.SOURCE_LIST] = list(configs[Key.SOURCE_LIST])[:2]

    def own_lists(stage, nid, configs):
        if stage == Stage.UNMASK:
            others = [n for n in range(101, 106) if n != nid]
            configs[Key.ACTIVE_NODE_ID_LIST] = [nid, 101] if nid != 101 else [101, 102, 103]
            configs[Key.DEAD_NODE_ID_LIST] = [n for n in others if n not in configs[Key.ACTIVE_NODE_ID_LIST]]
    fed, nodes = federation(clients, tamper=withhold)
    sums, replies = run(fed, clients)  # client-0 refuses to add; the sum runs again without it
    assert "from every neighbour" in refusals(nodes) and sorted(fed.left_out) == ["client-0"]
    np.testing.assert_allclose(sums[0], np.sum([VECTORS[c] for c in clients[1:]], axis=0), atol=4 * STEP)
    fed, nodes = federation(clients, tamper=own_lists)
    with pytest.raises(FedpgmError, match="did not complete"):
        run(fed, clients)
    assert "none as dropped" in refusals(nodes)
    assert not any(Key.SHARE_LIST in reply for reply in fed.grid.replies.get(Stage.UNMASK, {}).values())


def test_a_sum_opens_only_if_every_member_unmasks_it():
    """The second review's attacks: sums of one request opened by different subsets of members
    (neighbour sets that differ by node, or a colluder's shares beside two members') gave one
    vector by difference. Every seed now needs every member's share."""
    clients = ["client-0", "client-1", "client-2"]

    def withhold_unmask(stage, nid, configs):
        return not (stage == Stage.UNMASK and nid == 103)
    fed, nodes = federation(clients, tamper=withhold_unmask)
    with pytest.raises(FedpgmError, match="did not complete"):
        run(fed, clients)
    assert len(fed.grid.replies[Stage.UNMASK]) == 2  # two members unmasked: their seed shares are not enough

    def own_members(stage, nid, configs):  # node 101 is told of two members only, the others of three
        if stage == Stage.SETUP and nid == 101:
            configs[Key.SAMPLE_NUMBER] = configs[Key.SHARE_NUMBER] = configs[Key.THRESHOLD] = 2
        if stage == Stage.SHARE_KEYS and nid == 101:
            configs.pop("103")
    fed, nodes = federation(clients, tamper=own_members)
    with pytest.raises(FedpgmError):
        run(fed, clients)
    assert not any(Key.SHARE_LIST in r for r in fed.grid.replies.get(Stage.UNMASK, {}).values())


def test_the_secure_route_answers_nothing_outside_a_sums_stages():
    """The second review's bypass: Flower's mod hands any message type but "train" (e.g.
    "train.default", which Flower routes to the same function) to the route unmasked."""
    from flwr.app import ConfigRecord, Message, RecordDict

    fed, nodes = federation(["client-0", "client-1"])
    node = nodes[101]
    for kind, content in (("train.default", RecordDict({"fitins.config": ConfigRecord({})})),
                          ("train", RecordDict({"fitins.config": ConfigRecord({})}))):
        reply = node.handle(Message(content, dst_node_id=101, message_type=kind, group_id="1"))
        assert reply.has_error() and "only as a stage of a SecAgg+ sum" in reply.error.reason


def test_sums_of_different_members_are_differenced_unless_the_policy_pins_the_whole_roster():
    """The third review: a request varied in a field that does not change the addend (here the
    setting ``round``) dodges the once-per-request rule, and the difference of the sums over
    {0, 1, 2} and {0, 1} is client-2's vector exactly. ``secure_whole_roster`` refuses the second."""
    clients = ["client-0", "client-1", "client-2"]
    vectors = {c: VECTORS[c] for c in clients}
    fed, nodes = federation(clients)
    whole, _ = local_secure_sum(fed, vectors)
    part, _ = local_secure_sum(fed, vectors, {c: {"round": 2} for c in clients}, members=clients[:2])
    np.testing.assert_allclose(whole[0] - part[0], VECTORS["client-2"], atol=5 * STEP)
    fed, nodes = federation(clients, policy=ClientPolicy(secure_whole_roster=True))
    local_secure_sum(fed, vectors)
    with pytest.raises(FedpgmError, match="did not complete"):
        local_secure_sum(fed, vectors, {c: {"round": 2} for c in clients}, members=clients[:2])
    assert "only to sums of the whole roster; ['client-2'] are not members" in refusals(nodes)


def test_a_group_one_member_fills_is_refused_by_a_member_that_requires_secure_aggregation():
    """The third review: an F-CM module only one member trains is that member's update, read off
    an honest sum. Members sign the groups they filled; with require_secure_aggregation a member
    unmasks only if each of its groups is filled by min_cohort members."""
    clients = ["client-0", "client-1", "client-2"]
    vectors = {c: VECTORS[c] for c in clients}
    lonely = {"groups": {"shared": clients, "own": ["client-2"]}}  # only client-2 trains "own"
    fed, nodes = federation(clients)  # the default policy: the sum opens, "own" is client-2's alone
    sums, _ = local_secure_sum(fed, vectors, {c: lonely for c in clients})
    assert sums[1][0] == pytest.approx(1.0, abs=2 * STEP) and sums[2][0] == pytest.approx(3.0, abs=3 * STEP)  # own, shared
    strict = ClientPolicy(require_secure_aggregation=True)
    fed, nodes = federation(clients, policy=strict)
    with pytest.raises(FedpgmError, match="did not complete"):
        local_secure_sum(fed, vectors, {c: lonely for c in clients})
    assert "its group 'own' is filled by 1 member(s), fewer than its policy's min_cohort 2" in refusals(nodes)
    shared = {"groups": {"shared": clients, "own": clients[1:]}}
    sums, _ = local_secure_sum(fed, vectors, {c: shared for c in clients})
    np.testing.assert_allclose(sums[0], np.sum([VECTORS[c] for c in clients], axis=0), atol=3 * STEP)

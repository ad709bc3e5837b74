"""Secure aggregation with Flower's SecAgg+ (Bell et al. 2020): the server learns the sum of
the clients' vectors, never one client's vector.

``secure_sum(federation, name, ...)`` asks each client to run its handler ``name`` and add the
reply's arrays (named by ``order``) into a sum that only the members' masks cancel out of.
Flower's own pieces do the cryptography: the server runs ``SecAggPlusWorkflow`` (setup, share
keys, collect masked vectors, unmask: 4 round trips), the ClientApp's ``secaggplus_mod`` masks
the reply of the ``train`` route below, behind each client's checks (``secagg_guard``). A sum
completes only if every member adds to it (a client gives out no share of a dropped member's
key, which would let a malicious server open a member's vector), so where members drop out a new
sum starts among the rest, with fresh keys and masks; the result names its members.

SecAgg+ sums integers: each value a client adds must lie in [-``CLIP``, ``CLIP``] (the
client refuses otherwise, so nothing is clipped silently) and is quantized to 2^22 levels over
that range, so sums carry an error of about 4e-6 per client and value. Algorithms scale their
vectors accordingly (row-weighted fractions: ``fedpgm.federation.shares``).

Only the Flower backend can do this: SecAgg+ needs separate parties holding their own keys;
``Federation.secure_sum`` says so on the in-process backend. Why by hand: Flower's workflow is
written for its legacy strategies; this module is the adapter (a strategy that asks for one
handler's reply and keeps the sum) and nothing else.
"""

from __future__ import annotations

import json
from typing import cast

import flwr.compat.common.recorddict_compat as compat
import numpy as np
from flwr.app import ConfigRecord, Context, RecordDict
from flwr.app import Message as FlowerMessage
from flwr.common import (Code, FitIns, FitRes, Status, bytes_to_ndarray, ndarrays_to_parameters,
                         parameters_to_ndarrays)
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.server import ServerConfig
from flwr.server.strategy import Strategy
from flwr.serverapp import Grid
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey

from fedpgm.errors import FedpgmError
from fedpgm.federation.base import ClientFailure
from fedpgm.federation.codec import CodecError, Message, decode, encode
from fedpgm.federation.secagg_guard import ATTEST, CLIP, GROUPS, MODULUS, PARTY, QUANTIZATION, REQUEST

REPLY = "fedpgm-reply"  # FitRes metrics: the reply's config as JSON (counts and names, no arrays)


def update_vector(reply: Message, order: list[str], client: str) -> list[np.ndarray]:
    """The reply's arrays in ``order`` as float64, each value within [-CLIP, CLIP]."""
    missing = [k for k in order if k not in reply.arrays]
    if missing:
        raise FedpgmError(f"client '{client}' has no array(s) {missing[:3]} for the secure sum")
    out = [np.asarray(reply.arrays[k], dtype=np.float64) for k in order]
    worst = max((float(np.abs(a).max()) for a in out if a.size), default=0.0)
    if not np.isfinite(worst) or worst > CLIP:
        raise FedpgmError(f"client '{client}' would add a value of magnitude {worst:.3g} to a secure sum, "
                          f"outside SecAgg+'s range [-{CLIP}, {CLIP}]; the algorithm must scale it down")
    return out


def client_reply(msg: FlowerMessage, handle) -> FlowerMessage:
    """ClientApp side (under ``secaggplus_mod``): run the fedpgm request inside the FitIns through
    ``handle(request) -> reply`` and return its arrays as the FitRes the mod masks."""
    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    raw = fitins.config[REQUEST]
    if not isinstance(raw, bytes):
        raise CodecError("a SecAgg+ request without its fedpgm bytes")
    request = decode(raw)
    order, client = request.config.pop("secure_order", None), str(request.config.pop("client", "?"))
    if not isinstance(order, list) or not all(isinstance(k, str) for k in order):
        raise CodecError("a SecAgg+ request without the order of its arrays")
    reply = handle(request)  # (the runtime's keys removed: the handler's contract sees its own only)
    arrays = update_vector(reply, order, client)
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 1,
                    {REPLY: json.dumps(reply.config)})
    return FlowerMessage(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)


class NodeProxy:
    """What the workflow needs of a client: its node id."""

    def __init__(self, client: str, node_id: int) -> None:
        self.cid, self.node_id = client, node_id


class OneSum:
    """A legacy strategy for one SecAgg+ round: hands each client its request, keeps the result."""

    def __init__(self, fitins: dict[str, FitIns], node_of: dict[str, int]) -> None:
        self.proxies = {c: NodeProxy(c, node_of[c]) for c in fitins}
        self.fitins = fitins
        self.sum: list[np.ndarray] | None = None
        self.replies: dict[str, dict] = {}

    def configure_fit(self, server_round, parameters, client_manager):
        return [(self.proxies[c], ins) for c, ins in self.fitins.items()]

    def aggregate_fit(self, server_round, results, failures):
        # every result carries the same aggregate: the survivors' weighted mean (weights all 1)
        mean = parameters_to_ndarrays(results[0][1].parameters) if results else None
        self.sum = None if mean is None else [m * len(results) for m in mean]
        self.replies = {proxy.cid: json.loads(str(res.metrics[REPLY])) for proxy, res in results}
        return None, {}


class CountingGrid:
    """The grid, with the payload bytes of every message the workflow sends or receives counted
    in the federation's ledger (as ``NAME/secagg``), the server's view of each client's vector
    (``masked``: what arrived, masked, in the collect stage) kept for inspection, and the nodes'
    signatures relayed (``fedpgm.federation.secagg_guard``): of their keys (setup) to the share-keys
    stage, of their requests (collect) to the unmask stage."""

    RELAY = {Stage.SHARE_KEYS: Stage.SETUP, Stage.UNMASK: Stage.COLLECT_MASKED_VECTORS}

    def __init__(self, grid, ledger, label: str, client_of: dict[int, str]) -> None:
        self.grid, self.ledger, self.label, self.client_of = grid, ledger, label, client_of
        self.masked: dict[str, list[np.ndarray]] = {}
        self.signed: dict[str, dict[str, list[str]]] = {}  # stage -> node id -> [party, signature]
        self.answered: dict[str, set[str]] = {}  # stage -> clients that answered it

    def __getattr__(self, name):
        return getattr(self.grid, name)

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        stage = str(messages[0].content.config_records[RECORD_KEY_CONFIGS][Key.STAGE]) if messages else ""
        self.ledger.new_round()
        for m in messages:
            if self.signed.get(self.RELAY.get(stage, "")):
                m.content.config_records[RECORD_KEY_CONFIGS][ATTEST] = json.dumps(self.signed[self.RELAY[stage]])
            self.ledger.record("down", self.client_of.get(m.metadata.dst_node_id, "?"), self.label,
                               content_bytes(m.content))
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        for r in replies:
            if r.has_content():
                client = self.client_of.get(r.metadata.src_node_id, "?")
                self.ledger.record("up", client, self.label, content_bytes(r.content))
                self.answered.setdefault(stage, set()).add(client)
                configs = r.content.config_records.get(RECORD_KEY_CONFIGS, {})
                if Key.MASKED_PARAMETERS in configs:
                    self.masked[client] = [bytes_to_ndarray(b) for b in configs[Key.MASKED_PARAMETERS]]
                if ATTEST in configs:
                    groups = [str(configs[GROUPS])] if GROUPS in configs else []
                    self.signed.setdefault(stage, {})[str(r.metadata.src_node_id)] = [str(configs[PARTY]),
                                                                                     str(configs[ATTEST]), *groups]
        return replies


    def stayed(self, clients: list[str]) -> list[str]:
        """Of ``clients``, those that answered the first stage some did not: the members a new sum
        can have after this one failed (the rest refused before it, or dropped out)."""
        for stage in Stage.all():
            answered = self.answered.get(stage, set())
            if not set(clients) <= answered:
                return sorted(answered & set(clients))
        return list(clients)


def content_bytes(content: RecordDict) -> int:
    """Payload bytes of a Flower message: array data plus config values (numbers as 8 bytes)."""
    total = 0
    for arrays in content.array_records.values():
        total += sum(len(a.data) for a in arrays.values())
    for config in content.config_records.values():
        for v in config.values():
            for x in (v if isinstance(v, list) else [v]):
                total += len(x) if isinstance(x, (bytes, str)) else 8
    return total


def secure_sum(fed, context: Context, name: str, order: list[str], requests: dict[str, tuple[dict, dict]],
               timeout: float | None = None) -> tuple[list[np.ndarray], dict[str, dict]]:
    """A SecAgg+ sum over ``requests`` (client -> (arrays, config) of its ``name`` request): the sum
    of the members' reply arrays, in ``order``, and each member's reply config. A sum completes only
    if every member adds to it (``secagg_guard``); where some drop out, a new sum starts among the
    rest, and those that failed are recorded as left out of ``name``; with fewer than 2 left,
    ``FedpgmError``. ``fed.secagg_view`` keeps the masked vectors the server received in the last
    sum, ``fed.secagg_signers`` the parties that signed the request they were sent (none where
    clients have no party identity)."""
    if len(requests) < 2:
        raise FedpgmError(f"a secure sum needs at least 2 clients (3 to survive a dropout), got {len(requests)}")
    strategy, grid = one_secure_sum(fed, context, name, order, requests, timeout)
    if strategy.sum is None:
        if Stage.UNMASK in grid.answered:  # those who unmasked this request do not unmask it again
            raise FedpgmError(f"the secure sum of '{name}' did not complete: a member failed while it was being "
                              "unmasked, and the members unmask one sum of a request per run; run it again with "
                              "a new request")
        members = grid.stayed(list(requests))
        if not 2 <= len(members) < len(requests):
            raise FedpgmError(f"the secure sum of '{name}' did not complete: fewer than 2 of its {len(requests)} "
                              "clients stayed in it, or they refused it")
        for c in set(requests) - set(members):
            fed.left_out[c] = ClientFailure(c, name, "error", "dropped out of the secure sum")
        fed.log(f"secure sum: '{name}' again without {sorted(set(requests) - set(members))}")
        return secure_sum(fed, context, name, order, {c: requests[c] for c in members}, timeout)
    return strategy.sum, strategy.replies


def one_secure_sum(fed, context: Context, name: str, order: list[str], requests: dict[str, tuple[dict, dict]],
                   timeout: float | None) -> tuple[OneSum, CountingGrid]:
    """One run of Flower's SecAgg+ workflow over ``requests``: its strategy (``sum``: None if it
    did not complete) and its grid (who answered each stage)."""
    fitins = {}
    for c, (arrays, config) in requests.items():
        data = encode(Message(name, arrays, {**config, "secure_order": order, "client": c}))
        fitins[c] = FitIns(ndarrays_to_parameters([]), {REQUEST: bytes(np.asarray(data, np.uint8))})
    strategy = OneSum(fitins, fed.node_of)
    legacy = LegacyContext(context, ServerConfig(num_rounds=1), cast(Strategy, strategy))  # (duck-typed)
    legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: 1})
    legacy.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
        ndarrays_to_parameters([]), keep_input=True)
    # every client shares its keys with all others, and every share is needed to unmask, as every
    # client insists (``secagg_guard``)
    workflow = SecAggPlusWorkflow(num_shares=1.0, reconstruction_threshold=1.0, max_weight=1.0,
                                  clipping_range=CLIP, quantization_range=QUANTIZATION, modulus_range=MODULUS,
                                  timeout=timeout)
    grid = CountingGrid(fed.grid, fed.ledger, f"{name}/secagg", {v: k for k, v in fed.node_of.items()})
    fed.log(f"secure sum: '{name}' from {len(requests)} client(s) by SecAgg+")
    workflow(cast(Grid, grid), legacy)  # (a Grid that counts bytes: the methods the workflow calls)
    fed.secagg_view = grid.masked
    fed.secagg_signers = sorted(signed[0] for signed in grid.signed.get(Stage.COLLECT_MASKED_VECTORS, {}).values())
    return strategy, grid

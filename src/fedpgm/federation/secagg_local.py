"""SecAgg+ among in-process nodes, to test and measure the protocol itself: Flower's real
``SecAggPlusWorkflow`` and fedpgm's ``secure_sum`` on the server side, the real client mods on
each node (Flower's alone, or behind fedpgm's checks), every message copied as the wire would
copy it. A ``tamper(stage, node_id, configs)`` hook lets a hostile server rewrite what it sends
(or, returning False, withhold it)
(``tests/security/test_secure_sum_hostile.py``); ``benchmarks/security_cost.py`` times the checks.

Not a federation backend: one process holds every party's keys, so it proves nothing about
privacy in a deployment (``Federation.secure_sum`` runs on the Flower backend only).
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Callable

import numpy as np
from flwr.app import Context, Error, RecordDict
from flwr.app import Message as FlowerMessage
from flwr.client.mod import secaggplus_mod
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key
from flwr.supercore.task_identity import TaskIdentity

from fedpgm.data.policy import ClientPolicy
from fedpgm.federation.codec import Message
from fedpgm.federation.identity import Identity
from fedpgm.federation.ledger import Ledger
from fedpgm.federation.secagg import client_reply, secure_sum
from fedpgm.federation.secagg_guard import guarded_secaggplus

RUN = 7  # the run id every node and the server share


class LocalNode:
    """One node: its context, its mod (``guarded``: behind fedpgm's checks) and a ``contribute``
    handler that adds the array ``v/CLIENT`` of the request (and fails where the request's ``fail``
    names it; ``groups``: group -> the clients that fill it, added as ``weight/GROUP`` 1 or 0);
    ``refusals``: what it refused or failed."""

    def __init__(self, client: str, node_id: int, identity: Identity | None, guarded: bool,
                 policy: ClientPolicy) -> None:
        self.client = client
        self.refusals: list[str] = []
        self.context = Context(run_id=RUN, node_id=node_id, node_config={}, state=RecordDict(), run_config={})
        self.mod = guarded_secaggplus(lambda ctx: (client, policy, identity)) if guarded else secaggplus_mod

    def contribute(self, request: Message) -> Message:
        if self.client in request.config.get("fail", []):  # a member that drops out of the sum
            raise RuntimeError("failing on request")
        out = {"v": request.arrays[f"v/{self.client}"]}
        for group, members in request.config.get("groups", {}).items():  # the groups it fills, as F-CM's modules
            out[f"weight/{group}"] = np.array([float(self.client in members)])
        return Message("contribute", out)

    def handle(self, msg: FlowerMessage) -> FlowerMessage:
        try:
            return self.mod(msg, self.context, lambda m, ctx: client_reply(m, self.contribute))
        except Exception as e:  # a node's failure reaches the server as an error reply, as on Flower
            self.refusals.append(str(e))
            return FlowerMessage(Error(code=0, reason=str(e)), reply_to=msg)


class LocalGrid:
    """Hands each message, copied, to its node; ``replies``: stage -> node id -> reply configs."""

    def __init__(self, nodes: dict[int, LocalNode], tamper: Callable | None = None) -> None:
        self.nodes, self.tamper = nodes, tamper
        self.replies: dict[str, dict[int, dict]] = {}

    def send_and_receive(self, messages, *, timeout=None):
        out = []
        for m in messages:
            content = copy.deepcopy(m.content)
            configs = content.config_records[RECORD_KEY_CONFIGS]
            stage, nid = str(configs[Key.STAGE]), m.metadata.dst_node_id
            if self.tamper and self.tamper(stage, nid, configs) is False:
                continue  # (the server withholds this message)
            reply = self.nodes[nid].handle(FlowerMessage(content, dst_node_id=nid, message_type=m.metadata.message_type,
                                                         group_id=m.metadata.group_id))
            if reply.has_content():
                self.replies.setdefault(stage, {})[nid] = dict(reply.content.config_records[RECORD_KEY_CONFIGS])
            out.append(reply)
        return out


def local_federation(clients: list[str], guarded: bool = True, tamper: Callable | None = None,
                     outsider: str | None = None, policy: ClientPolicy | None = None):
    """(federation, nodes): what ``secure_sum`` needs of a federation, over in-process nodes with
    node ids 101, 102, ... and a common roster; ``outsider``: a node of the server's own under that
    name, with no party identity (its keys on no roster)."""
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = RUN, 0, 0
    identities: dict[str, Identity | None] = dict(Identity.generate([c for c in clients if c != outsider]))
    if outsider:
        identities[outsider] = None
    node_of = {c: 101 + i for i, c in enumerate(clients)}
    nodes = {node_of[c]: LocalNode(c, node_of[c], identities[c], guarded, policy or ClientPolicy()) for c in clients}
    fed = SimpleNamespace(node_of=node_of, grid=LocalGrid(nodes, tamper), ledger=Ledger(), log=lambda text: None,
                          left_out={}, secagg_view={}, secagg_signers=[])
    return fed, nodes


def local_secure_sum(fed, vectors: dict[str, np.ndarray], configs: dict[str, dict] | None = None,
                     members: list[str] | None = None):
    """``secure_sum`` of ``vectors`` (client -> its vector; every client is sent all of them, as one
    request) over ``fed``'s ``members`` (default: every client in ``vectors``); ``configs``: a
    client's own request settings (a hostile server's)."""
    arrays = {f"v/{c}": np.asarray(v, dtype=np.float64) for c, v in vectors.items()}
    requests = {c: (arrays, (configs or {}).get(c, {"round": 1})) for c in members or list(vectors)}
    groups = sorted(next(iter(requests.values()))[1].get("groups", {}))
    context = Context(run_id=RUN, node_id=0, node_config={}, state=RecordDict(), run_config={})
    return secure_sum(fed, context, "contribute", ["v"] + [f"weight/{g}" for g in groups], requests)

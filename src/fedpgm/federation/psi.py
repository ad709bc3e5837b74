"""Private row alignment: the parties of a vertical or hybrid federation find the row ids they
all hold by private set intersection (PSI), without revealing ids outside it, and every later
message of the run sees only those rows, in one agreed order.

Built on ``openmined-psi`` (ECDH-based PSI: each party blinds its ids with its own secret key on
an elliptic curve; only the holder of a key can undo its blinding, so the coordinator relays
points it cannot read). Its two-party protocol runs twice, with one party, the *leader*, in the
middle (4 rounds; ``align_rows``):

1. ``psi_start`` (all): each party makes a fresh key and its blinded request (its ids under
   its key); it sends the request and its id count.
2. ``psi_serve`` (each other party P): P answers the leader's request (re-blinded with a fresh
   key of P's) and sends its own ids under that key (the setup).
3. ``psi_intersect`` (leader): the leader unblinds each answer, intersects it with each setup,
   and keeps the ids every party holds, I; it then serves I (fresh key) to the other parties:
   one setup of I and an answer to each party's request from step 1.
4. ``psi_finish`` (each other party): P finds which of its ids are in I.

Each party then keeps the positions of its rows in I, sorted by id (the ids' natural order:
numbers numerically, text lexicographically), in its state (``ALIGNED``); from then on every
handler of the run sees only those rows (``ClientContext.align``), so row i is the same entity
at every party.

What each side learns: the coordinator (the server) sees blinded points, each party's id count
and |I|; a party other than the leader learns I and the leader's count; the leader learns, for
each other party, which of its own ids that party holds (with two parties that is exactly I;
with more, it can be more than I: pairwise PSI cannot do better). No message carries an id.

Why by hand: openmined-psi gives the two-party primitive only; the rounds over the federation,
the multi-party composition and the row bookkeeping are what this module adds.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from fedpgm.data.schema import ROW_ID
from fedpgm.errors import FedpgmError
from fedpgm.federation.base import Federation
from fedpgm.federation.codec import Message
from fedpgm.data.policy import PolicyRefusal
from fedpgm.federation.contract import NOTHING, Array, Contract, ListOf, Text
from fedpgm.federation.handlers import ALIGNED, ClientContext, HandlerSet
from fedpgm.federation.identity import Identity

ALIGNMENTS = ("none", "psi")
KEY = "psi/key"  # state: this party's client key (uint8), between start and finish
STEPS = "psi/steps"  # state: the PSI steps this party has taken in this run (each once)
INSTALL = ("private row alignment needs openmined-psi; install it with `pip install --no-deps "
           "openmined-psi==2.0.6` (--no-deps: its protobuf pin conflicts with flwr's, and it runs "
           "with flwr's protobuf)")


def psi_module():
    try:
        import private_set_intersection.python as psi
    except ImportError:
        raise FedpgmError(INSTALL) from None
    return psi


def blob(proto) -> np.ndarray:
    """A protobuf message as (bytes,) uint8."""
    return np.frombuffer(proto.SerializeToString(), np.uint8)


def parse(kind, data: np.ndarray):
    msg = kind()
    msg.ParseFromString(np.asarray(data, np.uint8).tobytes())
    return msg


def id_strings(ctx: ClientContext) -> tuple[list[str], pd.Index]:
    """This party's training row ids, as the strings PSI compares, and as held."""
    index = ctx.unaligned.train.index
    if index.name != ROW_ID:
        raise FedpgmError(f"client '{ctx.client_id}' holds no {ROW_ID} column (its rows are numbered by "
                          f"position); add the {ROW_ID} the parties share to its CSV")
    return [str(v) for v in index], index


def id_kind(index: pd.Index) -> str:
    return "number" if pd.api.types.is_numeric_dtype(index.dtype) else "text"


def keep(ctx: ClientContext, matched: list[int]) -> int:
    """Store the positions of this party's rows in the intersection, sorted by id: the run's
    alignment, fixed from now on (``one_exchange``)."""
    index = ctx.unaligned.train.index
    rows = np.asarray(sorted(matched), dtype=np.int64)
    order = np.argsort(index.to_numpy()[rows], kind="stable")
    ctx.state[ALIGNED] = rows[order]
    ctx.state.pop(KEY, None)
    return len(rows)


def identity_of(ctx: ClientContext) -> Identity:
    if ctx.identity is None:
        raise PolicyRefusal(f"client '{ctx.client_id}' has no identity key and roster, so it cannot authenticate "
                            "the other parties' PSI messages; give its node the deployment's identity files")
    return ctx.identity


def one_exchange(ctx: ClientContext, step: str) -> None:
    """Each step of PSI at most once per run, and none once the run's rows are aligned."""
    done = list(ctx.state.get(STEPS, []))
    if step in done or (ALIGNED in ctx.state and step != "psi_finish"):
        raise PolicyRefusal(f"client '{ctx.client_id}' has already taken part in this run's row alignment "
                            f"('{step}' once per run); start a new run to align again")
    ctx.state[STEPS] = done + [step]


def bounded(psi, ctx: ClientContext, request) -> None:
    n = len(request.encrypted_elements)
    if n > ctx.policy.max_psi_ids:
        raise PolicyRefusal(f"client '{ctx.client_id}' serves PSI requests of at most {ctx.policy.max_psi_ids} ids "
                            f"(its policy's max_psi_ids), got {n}")


HANDLERS = HandlerSet("psi")  # the PSI steps every family answers (``fedpgm.federation.runtime``)


@HANDLERS.query("psi_start", NOTHING)
def start(request: Message, ctx: ClientContext) -> Message:
    """A fresh key; the request (ids blinded with it), signed, and the id count."""
    psi = psi_module()
    me = identity_of(ctx)
    one_exchange(ctx, "psi_start")
    ids, index = id_strings(ctx)
    client = psi.client.CreateWithNewKey(True)
    ctx.state[KEY] = np.frombuffer(client.GetPrivateKeyBytes(), np.uint8).copy()
    blinded = blob(client.CreateRequest(ids))
    return Message("psi_start", {"request": blinded, "signature": me.sign("psi_start", blinded)},
                   {"n_ids": len(ids), "id_kind": id_kind(index)})


def serve(psi, ids: list[str], requests: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """As the PSI server with a fresh key: the setup of ``ids`` and an answer to each request."""
    server = psi.server.CreateWithNewKey(True)
    parsed = {k: parse(psi.Request, r) for k, r in requests.items()}
    n = max(len(r.encrypted_elements) for r in parsed.values())
    out = {"setup": blob(server.CreateSetupMessage(1e-9, n, ids, psi.DataStructure.RAW))}
    out.update({f"response/{k}": blob(server.ProcessRequest(r)) for k, r in parsed.items()})
    return out


def own_key(psi, ctx: ClientContext):
    if KEY not in ctx.state:
        raise FedpgmError(f"client '{ctx.client_id}' has no PSI key: 'psi_start' must come first")
    return psi.client.CreateFromKey(np.asarray(ctx.state[KEY], np.uint8).tobytes(), True)


@HANDLERS.query("psi_serve", Contract({"leader": Text()}, required=("leader",),
                                     arrays={"request": Array("u"), "signature": Array("u", 64)}))
def serve_leader(request: Message, ctx: ClientContext) -> Message:
    """Answer the leader's request (only one the leader signed, once per run, of a bounded size) and
    send this party's ids under a fresh key, signed for the leader."""
    psi = psi_module()
    me, leader = identity_of(ctx), request.config["leader"]
    me.verify(leader, request.arrays["signature"], "psi_start", request.arrays["request"])
    one_exchange(ctx, "psi_serve")
    parsed = parse(psi.Request, request.arrays["request"])
    bounded(psi, ctx, parsed)
    ids, _ = id_strings(ctx)
    out = serve(psi, ids, {"leader": request.arrays["request"]})
    out["signature"] = me.sign("psi_serve", leader, out["setup"], out["response/leader"])
    return Message("psi_serve", out)


@HANDLERS.query("psi_intersect", Contract({"parties": ListOf(Text(), 1024, unique=True)}, required=("parties",),
                                         arrays={"*": Array("u")}))
def intersect(request: Message, ctx: ClientContext) -> Message:
    """Leader: I = the ids every party holds (from answers each party signed); then serve I to each
    party's own signed request, signing each answer for that party."""
    psi = psi_module()
    me = identity_of(ctx)
    one_exchange(ctx, "psi_intersect")
    ids, _ = id_strings(ctx)
    client = own_key(psi, ctx)
    parties = list(request.config["parties"])
    if not parties or ctx.client_id in parties:
        raise PolicyRefusal(f"client '{ctx.client_id}' refuses an intersection over parties {parties}")
    common = set(range(len(ids)))
    empty = []
    for p in parties:
        keys = [f"{k}/{p}" for k in ("setup", "response", "request", "serve_sig", "start_sig")]
        if any(k not in request.arrays for k in keys):
            raise PolicyRefusal(f"client '{ctx.client_id}' got an incomplete PSI answer from '{p}'")
        a = {k.split("/")[0]: request.arrays[k] for k in keys}
        me.verify(p, a["serve_sig"], "psi_serve", ctx.client_id, a["setup"], a["response"])
        me.verify(p, a["start_sig"], "psi_start", a["request"])
        bounded(psi, ctx, parse(psi.Request, a["request"]))
        found = client.GetIntersection(parse(psi.ServerSetup, a["setup"]), parse(psi.Response, a["response"]))
        if not found:
            empty.append(p)
        common &= set(found)
    if not common:
        ctx.state.pop(KEY, None)
        return Message("psi_intersect", config={"n_rows": 0, "empty_with": empty})
    n = keep(ctx, list(common))
    shared = [ids[i] for i in sorted(common)]
    out = serve(psi, shared, {p: request.arrays[f"request/{p}"] for p in parties})
    for p in parties:
        out[f"signature/{p}"] = me.sign("psi_intersect", p, out["setup"], out[f"response/{p}"])
    return Message("psi_intersect", out, {"n_rows": n, "empty_with": []})


@HANDLERS.query("psi_finish", Contract({"leader": Text()}, required=("leader",),
                                      arrays={"setup": Array("u"), "response": Array("u"),
                                              "signature": Array("u", 64)}))
def finish(request: Message, ctx: ClientContext) -> Message:
    """Which of this party's ids are in I: only from the leader's signed answer to this party's own
    request of this run (nothing the relay makes up)."""
    psi = psi_module()
    me, leader = identity_of(ctx), request.config["leader"]
    a = request.arrays
    me.verify(leader, a["signature"], "psi_intersect", ctx.client_id, a["setup"], a["response"])
    one_exchange(ctx, "psi_finish")
    client = own_key(psi, ctx)
    found = client.GetIntersection(parse(psi.ServerSetup, a["setup"]), parse(psi.Response, a["response"]))
    return Message("psi_finish", config={"n_rows": keep(ctx, found)})


def check_align(align: str) -> str:
    if align not in ALIGNMENTS:
        raise FedpgmError(f"unknown row alignment '{align}'; use one of {', '.join(ALIGNMENTS)}")
    return align


def align_rows(fed: Federation, leader: str | None = None) -> dict:
    """Run PSI over the federation's clients (see the module doc); afterwards every client works on
    the common rows in the agreed order. Returns the report: intersection size, each party's id
    count, the leader, bytes, rounds and seconds."""
    psi_module()  # a clear error here, before any client is asked
    parties = list(fed.clients)
    if len(parties) < 2:
        raise FedpgmError(f"row alignment needs at least 2 parties, the federation has {len(parties)}")
    leader = parties[0] if leader is None else leader
    if leader not in parties:
        raise FedpgmError(f"PSI leader '{leader}' is not a client; use one of {parties}")
    others = [p for p in parties if p != leader]
    wall, before = time.perf_counter(), len(fed.ledger.entries)
    started = fed.broadcast("psi_start").require_all()
    kinds = {p: m.config["id_kind"] for p, m in started.items()}
    differ = [p for p in parties if kinds[p] != kinds[leader]]
    if differ:
        raise FedpgmError(f"client(s) {differ} hold {kinds[differ[0]]} row ids where '{leader}' holds "
                          f"{kinds[leader]} ones; give every party's {ROW_ID} the same format")
    lead = started[leader].arrays
    served = fed.broadcast("psi_serve", {"request": lead["request"], "signature": lead["signature"]},
                           {"leader": leader}, clients=others).require_all()
    arrays = {f"{k}/{p}": v for p in others for k, v in (("setup", served[p].arrays["setup"]),
                                                          ("response", served[p].arrays["response/leader"]),
                                                          ("serve_sig", served[p].arrays["signature"]),
                                                          ("request", started[p].arrays["request"]),
                                                          ("start_sig", started[p].arrays["signature"]))}
    inter = fed.send(leader, "psi_intersect", arrays, {"parties": others}).require_all()[leader]
    n = int(inter.config["n_rows"])
    if n == 0:
        with_whom = inter.config["empty_with"] or others
        raise FedpgmError(f"the parties hold no row id in common (client(s) {with_whom} share none with "
                          f"'{leader}'); check that every party's {ROW_ID} column uses the same ids")
    per: dict[str, tuple[dict, dict]] = {
        p: ({"setup": inter.arrays["setup"], "response": inter.arrays[f"response/{p}"],
             "signature": inter.arrays[f"signature/{p}"]}, {"leader": leader}) for p in others}
    done = fed.broadcast("psi_finish", clients=others, per_client=per).require_all()
    wrong = {p: int(m.config["n_rows"]) for p, m in done.items() if int(m.config["n_rows"]) != n}
    if wrong:
        raise FedpgmError(f"client(s) {sorted(wrong)} found {sorted(set(wrong.values()))} common rows where "
                          f"the leader found {n}; their ids changed during alignment, run it again")
    entries = fed.ledger.entries[before:]
    return {"method": "psi", "leader": leader, "intersection": n,
            "party_ids": {p: int(m.config["n_ids"]) for p, m in started.items()},
            "bytes": sum(e.bytes for e in entries), "messages": len(entries), "rounds": 4,
            "seconds": time.perf_counter() - wall}

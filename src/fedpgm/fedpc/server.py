"""FedPC server: Algorithm 1 (one-pass training) of Seng et al., on any federation backend.

1. ``describe``: each client's feature names and row count (never data); the client-by-feature
   indicator matrix M; features with identical columns of M form disjoint subspaces S(j) held by
   client sets O(j).
2. A subspace held by several clients becomes a sum over their circuits, weighted by row counts.
3. A subspace held by one client: that client clusters its rows (on its own columns) into K
   clusters and learns one circuit per cluster.
4. Products, each with every shared sum and one cluster circuit per single-client subspace
   (``fedpgm.fedpc.plan.glue``: random, combinatorial or aligned), so each spans all features.
5. A root sum over the products with weights rho = the summed training sizes of each product's
   children, normalised (or co-occurrence counts for aligned gluing): no forward or backward pass.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np

from fedpgm.circuits.io import from_payload
from fedpgm.circuits.learners import learner_spec
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.base import Federation
from fedpgm.federation.psi import align_rows, check_align
from fedpgm.federation.secret import share_secret
from fedpgm.fedpc import defaults
from fedpgm.fedpc.model import FedPC
from fedpgm.fedpc.plan import GLUES, Alternative, Plan, assemble, glue
from fedpgm.threads import one_thread

PLACEMENTS = ("server", "split")
# None: auto, resolved by each client from its rows (fedpgm.fedpc.defaults)
DEFAULT_PARAMS: dict[str, dict] = {
    "learnspn": {"min_instances_slice": None, "threshold": 0.3, "leaf": "gaussian"},
    "learnspn-cv": {},  # LearnSPNCV's own defaults: 120 s of selection per circuit
    "ratspn": {"depth": 2, "repetitions": 4, "n_sums": 4, "n_inputs": 4, "leaf": "gaussian", "em_iterations": 20},
    "pd": {}}  # DensePC's own defaults: the paper's MNIST settings (Table 5)


def global_schema(schemas: dict[str, Schema]) -> Schema:
    """The union of the clients' features; a name held with different types is an error."""
    feats: list[Feature] = []
    seen: dict[str, tuple[Feature, str]] = {}  # name -> (feature, first client holding it)
    for client, schema in schemas.items():
        for f in schema.features:
            if f.name in seen and seen[f.name][0] != f:
                raise FedpgmError(f"feature '{f.name}' has different types at clients "
                                  f"'{seen[f.name][1]}' and '{client}'; align the schemas")
            if f.name not in seen:
                seen[f.name] = (f, client)
                feats.append(f)
    labels = {s.label for s in schemas.values() if s.label is not None}
    levels = {s.pixel_levels for s in schemas.values()}
    return Schema(tuple(feats), labels.pop() if len(labels) == 1 else None, levels.pop() if len(levels) == 1 else None)


def subspaces(schemas: dict[str, Schema], schema: Schema) -> list[tuple[list[str], list[str]]]:
    """(feature names, holding clients) per group of identical columns of M, in feature order."""
    groups: dict[tuple, list[str]] = {}
    for name in schema.names:
        holders = tuple(c for c, s in schemas.items() if name in s)
        groups.setdefault(holders, []).append(name)
    return [(names, list(holders)) for holders, names in groups.items()]


def learner_params(learner: str, params: dict | None, seed: int) -> dict:
    """The local learner's parameters (defaults filled in; auto ones, None, left for each
    client to resolve: ``fedpgm.fedpc.defaults``), checked by building one."""
    estimator = learner_spec(learner).estimator
    out = {**DEFAULT_PARAMS[learner], **(params or {}), "seed": seed}
    try:
        estimator(**defaults.resolve(out, 1)).check_params()
    except TypeError as e:
        raise FedpgmError(f"bad parameters for the {learner} learner ({e})") from None
    return out


def check_alignment(described: dict, spaces) -> None:
    """A vertical federation (no subspace shared) must hold the same row ids at every client."""
    if len(described) < 2 or any(len(holders) > 1 for _, holders in spaces):
        return
    digests = {c: m.config["ids_digest"] for c, m in described.items()}
    first = next(iter(digests))
    for c, d in digests.items():
        if d != digests[first]:
            raise FedpgmError(f"the row ids of clients '{first}' and '{c}' do not align; a vertical "
                              "federation needs the same rows (row_id) at every client: align them "
                              "privately with align='psi' (--align psi)")


@one_thread()
def fit_fedpc(fed: Federation, clusters: int | None = None, glue_how: str = "random", products: int | None = None,
              learner: str = "learnspn", params: dict | None = None, placement: str = "server",
              seed: int = 0, min_clients: int | None = None, align: str = "none",
              smoothing: float | None = None) -> FedPC:
    """Learn a federated circuit in one pass (Algorithm 1); see the module doc.

    ``clusters``: per single-client subspace; None: ``defaults.clusters(glue_how)``.
    ``smoothing``: aligned gluing's pseudo-rows per observed cluster tuple toward the product of
    the marginals
    (``plan.glue``; 0: the co-occurrence counts alone); None: ``defaults.SMOOTHING``.

    ``align``: "psi" first finds the row ids every party holds by private set intersection and
    fits on those rows (``fedpgm.federation.psi``; ``info["alignment"]``); "none": the parties'
    rows must already align in a vertical federation.

    ``min_clients``: in a horizontal federation, go on without clients that fail or miss the
    deadline as long as this many answered (they are named in ``info["left_out"]``); None: every
    client must answer. Vertical and hybrid fits need every party's columns.

    Runs under one-thread limits (``fedpgm.threads``), as every client does, so the server's CPU
    seconds in the critical path count its work, not two thread pools spinning."""
    clusters = defaults.clusters(glue_how) if clusters is None else clusters
    if clusters < 1:
        raise FedpgmError(f"clusters must be >= 1, got {clusters}")
    if smoothing is not None and not smoothing >= 0:
        raise FedpgmError(f"smoothing (pseudo-rows per cluster tuple) must be >= 0, got {smoothing}")
    if glue_how not in GLUES:
        raise FedpgmError(f"unknown glue '{glue_how}'; use one of {', '.join(GLUES)}")
    if placement not in PLACEMENTS:
        raise FedpgmError(f"unknown placement '{placement}'; use server or split")
    params = learner_params(learner, params, seed)
    if min_clients is not None and not 1 <= min_clients <= len(fed.clients):
        raise FedpgmError(f"min_clients must lie in 1..{len(fed.clients)} (the clients), got {min_clients}")
    if check_align(align) == "psi" and min_clients is not None:
        raise FedpgmError("min_clients and PSI alignment do not mix: aligned rows need every party")
    alignment = align_rows(fed) if align == "psi" else None
    wall = time.perf_counter()
    described = fed.broadcast("describe").require(min_clients)
    server_cpu = time.process_time()
    schemas = {c: Schema.from_dict(m.config["schema"]) for c, m in described.items()}
    sizes = {c: int(m.config["n_rows"]) for c, m in described.items()}
    empty = [c for c, n in sizes.items() if n == 0]
    if empty:
        raise FedpgmError(f"client(s) {empty} have no rows; leave them out of the federation")
    schema = global_schema(schemas)
    spaces = subspaces(schemas, schema)
    horizontal = len(spaces) == 1
    if min_clients is not None and not horizontal:
        raise FedpgmError("min_clients applies to horizontal federations only: a vertical or hybrid "
                          "FedPC needs every party's columns")
    check_alignment(described, spaces)
    per_client: dict[str, tuple[dict, dict]] = {}
    for c in described:
        shared = [names for names, holders in spaces if c in holders and len(holders) > 1]
        own = next((names for names, holders in spaces if holders == [c]), [])
        if own and clusters > sizes[c]:
            raise FedpgmError(f"{clusters} clusters requested but client '{c}' has {sizes[c]} rows; "
                              "lower --clusters")
        per_client[c] = ({}, {"shared": shared, "own": own, "clusters": clusters, "learner": learner,
                              "params": params, "send": placement == "server",
                              "memberships": glue_how == "aligned"})
    server_cpu = time.process_time() - server_cpu
    if glue_how == "aligned" and len(per_client) > 1:  # the key of the row tokens, unknown to this server
        share_secret(fed, list(per_client))
    replies = fed.broadcast("fit", clients=list(per_client), per_client=per_client).require(min_clients)
    shared_spaces = {j for j, (_, holders) in enumerate(spaces) if len(holders) > 1}
    if len(replies) < len(per_client):  # a quorum went on: the shared subspace's holders shrink
        spaces = [(names, [c for c in holders if c in replies]) for names, holders in spaces]
    t0 = time.process_time()

    components, alternatives, circuits = [], [], []
    for j, (names, holders) in enumerate(spaces):
        def add(client: str, entry: dict, j: int = j) -> int:
            components.append({"client": client, "key": entry["key"], "subspace": j, "n": int(entry["n"])})
            if placement == "server":
                prefix = entry["key"] + "/"
                tensors = {k[len(prefix):]: v for k, v in replies[client].arrays.items() if k.startswith(prefix)}
                circuits.append(from_payload(entry["doc"], tensors, f"circuit from client '{client}'")[0])
            return len(components) - 1

        entries = {c: {e["key"]: e for e in replies[c].config["circuits"]} for c in holders}
        if j in shared_spaces:
            ids = [add(c, entries[c][f"shared{per_client[c][1]['shared'].index(names)}"]) for c in holders]
            n = np.array([components[i]["n"] for i in ids], dtype=float)
            alternatives.append([Alternative(ids, list(n / n.sum()))])
        else:
            c = holders[0]
            keys = [k for k in entries[c] if k.startswith("cluster")]  # (fewer if the client merged small ones)
            alternatives.append([Alternative([add(c, entries[c][k])], [1.0]) for k in keys])
    smoothing = defaults.SMOOTHING if smoothing is None else smoothing
    if glue_how == "aligned" and smoothing > 0:
        aligned_mixtures(alternatives, components, shared_spaces)
    alt_sizes = [[sum(components[i]["n"] for i in a.components) for a in alts] for alts in alternatives]
    cooccurrence = memberships(replies, spaces) if glue_how == "aligned" else None
    chosen, weights = glue(alt_sizes, glue_how, products, np.random.default_rng(seed), cooccurrence, smoothing)
    plan = Plan([{"features": names, "clients": holders} for names, holders in spaces], components,
                alternatives, chosen, weights)
    dense_circuits = [c for c in circuits if c.dense]
    node_circuits = [c for c in circuits if not c.dense]
    dense = placement == "server" and bool(dense_circuits)
    circuit = assemble(plan, schema, node_circuits) if placement == "server" and not dense else None
    server_cpu += time.process_time() - t0
    client_seconds = {c: float(m.config["seconds"]) for c, m in replies.items()}
    policy = {c: m.config["policy"] for c, m in replies.items() if "policy" in m.config}
    info = {"clusters": clusters, "glue": glue_how, "smoothing": smoothing, "learner": learner, "params": params,
            "placement": placement, "plan": plan.describe(),
            "client_seconds": client_seconds, "server_seconds": server_cpu,
            "critical_path_seconds": max(client_seconds.values()) + server_cpu,
            "train_seconds": time.perf_counter() - wall, "communication": fed.ledger.totals()}
    if fed.left_out:
        info["left_out"] = fed.left_out_report()
    if policy:
        info["client_policy"] = policy  # what each client's own privacy policy changed
    if alignment is not None:
        info["alignment"] = alignment
    if glue_how == "aligned":
        info["shared_with_server"] = ("cluster index of every row, keyed by a hash of its id under a key only "
                                      "the parties share")
    if circuit is not None:
        info.update(circuit.stats())
    if dense:
        info["n_params"] = sum(c.n_params for c in dense_circuits)
    return FedPC(schema, plan, circuit, info, federation=fed if placement == "split" else None,
                 components=dense_circuits if dense else None)


def aligned_mixtures(alternatives: list[list[Alternative]], components: list[dict], shared: set[int]) -> None:
    """Appends to each single-client subspace's alternatives the mixture of all its cluster
    circuits, weighted by their rows: the smoothing product of aligned gluing (``plan.glue``)."""
    for j, alts in enumerate(alternatives):
        if j not in shared:
            ids = [a.components[0] for a in alts]
            n = np.array([components[i]["n"] for i in ids], dtype=float)
            alts.append(Alternative(ids, list(n / n.sum())))


def memberships(replies: dict, spaces) -> dict[tuple, int]:
    """Counts of cluster-index tuples over the rows every clustering client holds (matched by
    their keyed row tokens, ``fedpgm.federation.secret``)."""
    columns: list[dict | None] = []  # per subspace: row token -> cluster index (None: shared)
    for _names, holders in spaces:
        if len(holders) > 1:
            columns.append(None)  # a shared subspace has a single alternative
            continue
        m = replies[holders[0]]
        columns.append(dict(zip(m.arrays["memberships/ids"].tolist(), m.arrays["memberships/cluster"].tolist())))
    keyed = [c for c in columns if c is not None]
    if not keyed:
        return {}
    common = set(keyed[0]).intersection(*keyed[1:])
    return dict(Counter(tuple(0 if col is None else col[row] for col in columns) for row in common))

"""FedPC server: Algorithm 1 (one-pass training) of Seng et al., on any federation backend.

1. ``describe``: each client's feature names and row count (never data); the client-by-feature
   indicator matrix M; features with identical columns of M form disjoint subspaces S(j) held by
   client sets O(j).
2. A subspace held by several clients becomes a sum over their circuits, weighted by row counts.
3. A subspace held by one client: that client clusters its rows (on its own columns) into K
   clusters and learns one circuit per cluster.
4. Products, each with every shared sum and one cluster circuit per single-client subspace
   (``fedpgm.fedpc.plan.glue``: random or combinatorial), so each spans all features.
5. A root sum over the products with weights rho = the summed training sizes of each product's
   children, normalised: no forward or backward pass.

Aligned gluing (``fedpgm.fedpc.plan.aligned``) replaces steps 4-5 with a model of the tuples
of cluster indices the clients' shared rows fall in (learned from a masked sum: ``cooccurrence``):
the observed tuples or latent classes over them, mixed with the plain product of the clients.
"""

from __future__ import annotations

import time

import numpy as np

from fedpgm.circuits.io import from_payload
from fedpgm.circuits.learners import learner_spec
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.base import Federation
from fedpgm.federation.psi import align_rows, check_align
from fedpgm.federation.secret import share_secret
from fedpgm.fedpc import defaults, refine
from fedpgm.fedpc.client import EM_REQUESTS
from fedpgm.fedpc.model import FedPC
from fedpgm.fedpc.plan import GLUES, Alternative, Plan, TupleModel, aligned, assemble, glue, tuple_model
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
def fit_fedpc(fed: Federation, clusters: int | None = None, glue_how: str = "auto", products: int | None = None,
              learner: str = "learnspn", params: dict | None = None, placement: str = "server",
              seed: int = 0, min_clients: int | None = None, align: str = "none",
              smoothing: float | None = None, refine_passes: int | None = None, cluster_fit: str = "learn") -> FedPC:
    """Learn a federated circuit in one pass (Algorithm 1); see the module doc.

    ``glue_how``: random, combinatorial, aligned or auto (``defaults.glue``); ``clusters``: per
    single-client subspace; None: ``defaults.clusters(glue_how)``.
    ``smoothing``: aligned gluing's pseudo-rows per observed cluster tuple toward the product of
    the clients' circuits of all their rows (the observed tuples' weight; 0: the counts alone);
    None: the tuples' model (observed tuples or latent classes) and the product's weight chosen
    on held-out tuples (``plan.tuple_model``).

    ``cluster_fit``: how each client fits its cluster circuits: learn (a structure per cluster,
    the paper's) or refit (its circuit of all rows, refitted by EM on each cluster's rows;
    ``defaults.cluster_fit``).

    ``refine_passes``: in a horizontal federation with server placement, at most this many
    passes of federated EM over every client's rows refine the assembled circuit, kept while the
    clients' held-out rows score better (``fedpc.refine``); None: ``refine.PASSES`` there, none
    where a client's policy requires DP (it answers no EM request); 0: the paper's one pass.

    ``align``: "psi" first finds the row ids every party holds by private set intersection and
    fits on those rows (``fedpgm.federation.psi``; ``info["alignment"]``); "none": the parties'
    rows must already align in a vertical federation.

    ``min_clients``: in a horizontal federation, go on without clients that fail or miss the
    deadline as long as this many answered (they are named in ``info["left_out"]``); None: every
    client must answer. Vertical and hybrid fits need every party's columns.

    Runs under one-thread limits (``fedpgm.threads``), as every client does, so the server's CPU
    seconds in the critical path count its work, not two thread pools spinning."""
    if clusters is not None and clusters < 1:
        raise FedpgmError(f"clusters must be >= 1, got {clusters}")
    if refine_passes is not None and not (isinstance(refine_passes, int) and 0 <= refine_passes < EM_REQUESTS):
        raise FedpgmError(f"refine_passes must be an integer in 0..{EM_REQUESTS - 1} (a client answers "
                          f"{EM_REQUESTS} EM requests per run), got {refine_passes!r}")
    if smoothing is not None and not smoothing >= 0:
        raise FedpgmError(f"smoothing (pseudo-rows per cluster tuple) must be >= 0, got {smoothing}")
    if cluster_fit not in defaults.CLUSTER_FITS:
        raise FedpgmError(f"unknown cluster fit '{cluster_fit}'; use one of {', '.join(defaults.CLUSTER_FITS)}")
    if glue_how not in GLUES + ("auto",):
        raise FedpgmError(f"unknown glue '{glue_how}'; use auto or one of {', '.join(GLUES)}")
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
    requested, glue_how = glue_how, defaults.glue(glue_how, spaces, described)
    clusters = defaults.clusters(glue_how) if clusters is None else clusters
    fits_clusters = defaults.cluster_fit(cluster_fit, learner)
    per_client: dict[str, tuple[dict, dict]] = {}
    for c in described:
        shared = [names for names, holders in spaces if c in holders and len(holders) > 1]
        own = next((names for names, holders in spaces if holders == [c]), [])
        if own and clusters > sizes[c]:
            raise FedpgmError(f"{clusters} clusters requested but client '{c}' has {sizes[c]} rows; "
                              "lower --clusters")
        per_client[c] = ({}, {"shared": shared, "own": own, "clusters": clusters, "learner": learner,
                              "params": params, "send": placement == "server",
                              "memberships": glue_how == "aligned" and bool(own),
                              "whole": glue_how == "aligned" and smoothing != 0,
                              "refit": fits_clusters == "refit"})
    server_cpu = time.process_time() - server_cpu
    if glue_how == "aligned":  # the key of the row tokens and masks, unknown to this server
        clustering = [c for c, (_, cfg) in per_client.items() if cfg["own"]]
        if len(clustering) < 2:
            raise FedpgmError("aligned gluing needs at least two clients with columns of their own (vertical or "
                              "hybrid); use --glue random")
        share_secret(fed, clustering)
    replies = fed.broadcast("fit", clients=list(per_client), per_client=per_client).require(min_clients)
    shared_spaces = {j for j, (_, holders) in enumerate(spaces) if len(holders) > 1}
    if len(replies) < len(per_client):  # a quorum went on: the shared subspace's holders shrink
        spaces = [(names, [c for c in holders if c in replies]) for names, holders in spaces]
    t0 = time.process_time()

    components, alternatives, circuits = [], [], []
    clusters_of: dict[int, int] = {}  # single-client subspace -> its cluster circuits
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
            clusters_of[j] = len(keys)
            keys += ["whole"] if "whole" in entries[c] else []  # (last: the product of aligned gluing)
            alternatives.append([Alternative([add(c, entries[c][k])], [1.0]) for k in keys])
    if glue_how == "aligned":
        tuples = cooccurrence(fed, replies, spaces, clustering)
        radix = [clusters_of.get(j, 1) for j in range(len(spaces))]
        if smoothing is None:
            model = tuple_model(tuples, radix, seed=seed)
        else:  # the observed tuples, each with ``smoothing`` pseudo-rows of the product
            distinct = len(np.unique(tuples, axis=0))
            model = TupleModel(None, smoothing * distinct / (len(tuples) + smoothing * distinct))
        chosen, weights = aligned(alternatives, radix, tuples, model, seed)
    else:
        alt_sizes = [[sum(components[i]["n"] for i in a.components) for a in alts] for alts in alternatives]
        chosen, weights = glue(alt_sizes, glue_how, products, np.random.default_rng(seed))
    plan = Plan([{"features": names, "clients": holders} for names, holders in spaces], components,
                alternatives, chosen, weights)
    dense_circuits = [c for c in circuits if c.dense]
    node_circuits = [c for c in circuits if not c.dense]
    dense = placement == "server" and bool(dense_circuits)
    circuit = assemble(plan, schema, node_circuits) if placement == "server" and not dense else None
    server_cpu += time.process_time() - t0
    client_seconds = {c: float(m.config["seconds"]) for c, m in replies.items()}
    willing = all(described[c].config.get("refines", False) for c in replies)  # (a DP policy answers no EM)
    passes = (refine.PASSES if willing else 0) if refine_passes is None else refine_passes
    refined = None
    if horizontal and circuit is not None and passes > 0:
        circuit, refined = refine.refine(fed, circuit, list(replies), passes, min_clients=min_clients)
        server_cpu += refined["server_seconds"]
        client_seconds = {c: s + refined["client_seconds"][c] for c, s in client_seconds.items()}
    policy = {c: m.config["policy"] for c, m in replies.items() if "policy" in m.config}
    info = {"clusters": clusters, "glue": glue_how, "glue_requested": requested, "smoothing": smoothing,
            "cluster_fit": fits_clusters,
            "learner": learner, "params": params,
            "placement": placement, "plan": plan.describe(),
            "client_seconds": client_seconds, "server_seconds": server_cpu,
            "critical_path_seconds": max(client_seconds.values()) + server_cpu,
            "train_seconds": time.perf_counter() - wall, "communication": fed.ledger.totals()}
    if refined is not None:
        info["em"] = {k: refined[k] for k in ("passes", "better", "n_holdout")}
    if fed.left_out:
        info["left_out"] = fed.left_out_report()
    if policy:
        info["client_policy"] = policy  # what each client's own privacy policy changed
    if alignment is not None:
        info["alignment"] = alignment
    if glue_how == "aligned":
        info["tuple_model"] = {"classes": model.classes, "product_weight": model.product,
                               "described": model.describe()}
        info["shared_with_server"] = ("counts of the cluster-index tuples of the rows the parties share (a sum of "
                                      "masked indices in an order only the parties know) and each party's row "
                                      "tokens (hashes of its ids under a key only the parties share)")
    if circuit is not None:
        info.update(circuit.stats())
    if dense:
        info["n_params"] = sum(c.n_params for c in dense_circuits)
    return FedPC(schema, plan, circuit, info, federation=fed if placement == "split" else None,
                 components=dense_circuits if dense else None)


def cooccurrence(fed: Federation, replies: dict, spaces, parties: list[str]) -> np.ndarray:
    """(rows, subspaces) the tuples of cluster indices of the rows every clustering client holds
    (0 for a shared subspace), in an order no one but the parties can link to a row, learned
    without any party's cluster indices: the rows are the intersection of the parties' row tokens
    (``fedpgm.federation.secret``), each party sends its indices times its radix weight plus masks
    that cancel over the parties, in an order of keyed hashes (``fedpc.client.cooccurrence``),
    and the sum gives each row's tuple in that order. ``parties``: the clustering clients in the
    order the run's secret was dealt to them."""
    space_of = {holders[0]: j for j, (_names, holders) in enumerate(spaces) if len(holders) == 1}
    rows = replies[parties[0]].arrays["memberships/ids"]
    for c in parties[1:]:
        rows = np.intersect1d(rows, replies[c].arrays["memberships/ids"])
    if len(rows) == 0:
        raise FedpgmError("aligned gluing found no rows shared by the clients that cluster; their row ids "
                          "must overlap (vertical or hybrid with overlapping rows)")
    radix = [sum(e["key"].startswith("cluster") for e in replies[c].config["circuits"]) for c in parties]
    if np.prod(radix, dtype=float) >= 2.0**63:
        raise FedpgmError(f"aligned gluing's {'x'.join(map(str, radix))} cluster tuples do not fit a 64-bit "
                          "count key; lower --clusters")
    weights = [int(np.prod(radix[:i], dtype=np.int64)) for i in range(len(parties))]
    masked = fed.broadcast("cooccurrence", {"rows": rows.astype(np.uint64)}, {"weights": weights},
                           clients=parties).require_all()
    total = np.zeros(len(rows), dtype=np.uint64)
    for c in parties:
        total = total + masked[c].arrays["masked"].astype(np.uint64)  # (wraps mod 2**64: the masks cancel)
    if (total >= np.uint64(int(np.prod(radix, dtype=np.int64)))).any():
        raise FedpgmError("aligned gluing's masked cluster indices did not cancel (a party answered for other "
                          "rows, weights or parties than the others); start a new run")
    tuples = np.zeros((len(rows), len(spaces)), dtype=np.int64)
    for c, w, k in zip(parties, weights, radix):
        tuples[:, space_of[c]] = (total // np.uint64(w)) % np.uint64(k)
    return tuples

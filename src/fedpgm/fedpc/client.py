"""FedPC client handlers: describe the columns held, learn the local circuits once, answer queries.

- ``describe``: the schema of the columns held, the number of training rows, a digest of the
  sorted row ids (so the server can check that a vertical federation's rows align) and whether
  the client takes part in aligned gluing (its policy allows it and it has an identity) and in
  EM refinement (``answers_em``); never rows.
- ``fit``: one circuit per subspace shared with other clients (on all rows) and, for this
  client's own subspace, its rows clustered by k-means on those columns only and one circuit per
  cluster, learned on the cluster's rows or, with ``refit``, the circuit of all its rows
  refitted by EM on them (``refitted``; with ``whole``, that circuit of all rows is sent too).
  The circuits are kept in the client's work folder; the reply carries them (structure JSON in
  the config, packed parameters as arrays) only for server placement. With aligned gluing the
  reply also carries the set of the client's row tokens (hashes of its row ids under a key the
  parties share and the coordinator does not know, ``fedpgm.federation.secret``), so the server
  can find the rows every clustering party holds; no cluster index.
- ``cooccurrence`` (aligned gluing): for those shared rows, each row's cluster index times a
  weight plus masks that cancel over the parties, in an order only the parties can derive. The
  server's sum over the parties is the rows' tuples of cluster indices in an order it cannot link
  to any row (their histogram: the co-occurrence counts); one party's values alone are uniform.
- ``em`` (horizontal refinement, ``fedpgm.fedpc.refine``): for the assembled circuit the
  server sends, the expected statistics of EM over this client's rows, each resting on at least
  ``min_rows`` rows (``circuits.em.resting``): the edge counts of every sum and the weighted
  sufficient statistics of every leaf above the floor (a node below is left out, and the server
  keeps it unless another client sends it; an edge below sends its sum's weight times the sum's
  flow), and the log-likelihood
  summed over a held-out share of its rows that the statistics leave out (a scalar, over at
  least ``min_rows`` rows).
- ``loglik``: per-row log-likelihoods of the kept circuits for query rows the server sends
  (only the columns this client holds); split placement evaluates the FedPC this way.
- ``fit_tree``: FC[DT]'s expert (bagged or boosted decision trees) on this client's columns and
  labelled rows, as arrays.

Timings in replies (``seconds``) are this process's CPU time, i.e. the time the work takes on a
machine of its own, whatever else shares this one.
"""

from __future__ import annotations

import copy
import hashlib
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.cluster import KMeans

from fedpgm.circuits import learnspn
from fedpgm.circuits.dense_inputs import INPUTS
from fedpgm.circuits.compiled import CompiledCircuit
from fedpgm.circuits.em import E_STEP_DTYPE, em as em_passes, expected_statistics, resting
from fedpgm.circuits.estimator import as_matrix
from fedpgm.circuits.io import from_payload, load_circuit, save_payload, to_payload
from fedpgm.circuits.learners import LEARNERS, learner_spec, log_likelihood_of
from fedpgm.circuits.leaves import ALPHA, CONTINUOUS_LEAVES
from fedpgm.circuits.structure import Circuit, combine
from fedpgm.circuits.weighted import MIN_STD, MIN_STD_FRACTION, std_floors
from fedpgm.data.partition import ClientData
from fedpgm.data.policy import ClientPolicy, PolicyRefusal
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.codec import Message
from fedpgm.federation.contract import (NOTHING, Array, Choice, Columns, Contract, Doc, Fields, Flag, Float, Int,
                                        ListOf, Maybe, Text)
from fedpgm.federation.handlers import ClientContext, HandlerSet
from fedpgm.federation.secret import PARTIES, SECRET, cancelling_masks, keyed_hashes, row_tokens
from fedpgm.fedpc import defaults
from fedpgm.fedpc.experts import Expert, expert_message


def warm_up(folder: Path) -> None:
    """Pay a fresh process's one-time costs of a fit before anything is timed: LearnSPN's
    (``learnspn.warm_up``) and those of this handler's other steps (the estimator's input checks,
    k-means on the client's columns, compiling, encoding and saving circuits), by answering a fit
    request for a small synthetic table; its files go to ``folder``, removed after. A worker that
    did not fork from a warm process otherwise pays them in its first timed fit (a horizontal
    breast cancer client started from a forkserver: 19-21 ms of CPU instead of about 5)."""
    learnspn.warm_up()
    x = np.random.default_rng(0).normal(size=(64, 3))
    x[:32, :2] += 4.0
    schema = Schema(tuple(Feature(f"x{j}", "continuous") for j in range(3)))
    data = ClientData("warm-up", schema, pd.DataFrame(x, columns=schema.names), policy=ClientPolicy(min_rows=1))
    config = {"shared": [], "own": schema.names, "clusters": 2, "learner": "learnspn", "send": True,
              "params": {"min_instances_slice": 16}, "memberships": False}
    try:
        fit(Message("fit", config=config), ClientContext("warm-up", data, folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


HANDLERS = HandlerSet("fedpc", warm_up=warm_up)
FOLDER = "fedpc"
TOKENS, LABELS = "fedpc/tokens", "fedpc/labels"  # state: this run's clustering for aligned gluing: (rows,)
# sorted row tokens and their cluster indices
COUNTED = "fedpc/cooccurrence_sent"  # state: this run's masked cluster indices have left
BIG = 10**9  # a row count no table reaches: "no upper bound" for row settings

# Every learner setting a server may send, bounded so that no request can make a client spend
# unbounded memory or time; each learner's own parameter validation checks the rest.
PARAMS = Fields({
    "seed": Int(0, 2**32 - 1), "leaf": Choice(*dict.fromkeys(CONTINUOUS_LEAVES + INPUTS)),
    "precision": Choice("float32", "float64"), "min_std_fraction": Float(1e-6, 1.0), "by_label": Flag(),
    "min_leaf_rows": Int(1, BIG),
    # learnspn
    "min_instances_slice": Maybe(Int(1, BIG)), "threshold": Float(0.0, 1.0), "leaf_model": Text(32),
    "alpha": Float(0.0, 1e3), "row_clusters": Int(2, 16), "em_iterations": Int(0, 1000),
    "latent_states": Int(1, 64), "em_batch_size": Maybe(Int(1, BIG)),
    # learnspn-cv
    "budget_s": Float(0.1, 3600.0), "valid_fraction": Float(0.01, 0.5), "min_instances_floor": Int(1, BIG),
    "max_em_iterations": Maybe(Int(0, 1000)),
    # ratspn and pd
    "depth": Int(1, 8), "repetitions": Int(1, 64), "n_sums": Int(1, 64), "n_inputs": Int(1, 64),
    "batch_size": Maybe(Int(1, BIG)), "restarts": Int(1, 16),
    "structure": Text(32), "units": Int(1, 64), "pieces": Int(1, 64), "cell": Maybe(Float(1e-6, 1e6)),
    "method": Text(32), "epochs": Int(1, 1000), "frequency": Int(1, 1000), "step": Float(0.0, 1.0),
    "lr": Float(0.0, 10.0), "min_var": Float(1e-9, 1.0), "max_var": Float(1e-9, 1e3), "device": Choice("auto", "cpu"),
})
FIT = Contract({"shared": ListOf(Columns(), 64), "own": Columns(), "learner": Choice(*LEARNERS),
                "clusters": Int(1, 256), "params": PARAMS, "send": Flag(), "memberships": Flag(),
                "whole": Flag(), "refit": Flag()},
               required=("shared", "own", "learner", "clusters", "params", "send"))
# EM statistics for a circuit the server assembled: the client trains nothing, but what it sends
# is a function of a model the server chose (``sent_model``: refused where the policy wants DP)
EM = Contract({"circuit": Doc(1 << 24)}, required=("circuit",), arrays={"circuit/*": Array("f", 1 << 26)},
              sent_model=True)
EM_HOLDOUT = 0.1  # of the client's rows, held out of EM's statistics to score each pass
EM_REQUESTS = 11  # answered per run: the one-pass circuit and at most 10 passes (one bit each)
EM_SCORE, EM_COUNT = "fedpc_em_score", "fedpc_em_requests"
LOGLIK = Contract({"columns": Columns()}, required=("columns",),
                  arrays={"X": Array("f", 1 << 26)})
COOCCURRENCE = Contract({"weights": ListOf(Int(1, 2**63 - 1), 1024)}, required=("weights",),
                       arrays={"rows": Array("u", BIG)})
FIT_TREE = Contract({"ensemble": Choice("bagging", "boosting"), "max_depth": Maybe(Int(1, 32)),
                     "min_samples_leaf": Maybe(Int(1, BIG)), "seed": Int(0, 2**32 - 1), "trees": Int(1, 1000),
                     "reference_columns": Maybe(Columns())},
                    required=("max_depth", "seed"))


@HANDLERS.query("describe", NOTHING)
def describe(request: Message, ctx: ClientContext) -> Message:
    ids = sorted(str(i) for i in ctx.data.train.index)
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    return Message("describe", config={"schema": ctx.data.schema.to_dict(), "n_rows": len(ids),
                                       "ids_digest": digest,
                                       "aligned": bool(ctx.policy.memberships and ctx.identity is not None),
                                       "refines": answers_em(ctx)})


def learn(ctx: ClientContext, names: list[str], rows: np.ndarray, learner: str, params: dict):
    """The circuit of ``rows`` x ``names``; an auto slice minimum is resolved from those rows
    (``fedpgm.fedpc.defaults``), at least the client's policy floor. Columns that ``rows`` (a
    cluster) never observe take their model from all the client's rows, times the circuit of
    the others on ``rows`` (k-means puts rows missing a column together: geepack's dietox)."""
    spec = learner_spec(learner)
    schema = ctx.data.schema.select(names)
    whole = ctx.data.train[schema.names]
    unseen = [n for n in names if whole[n].iloc[rows].isna().all()]
    if unseen and not spec.dense and len(rows) < len(whole):
        everything = np.arange(len(whole))
        seen = [n for n in names if n not in unseen]
        parts = [learn(ctx, unseen, everything, learner, params)]
        parts += [learn(ctx, seen, rows, learner, params)] if seen else []
        return combine(parts, schema, "product")
    params = defaults.resolve(params, len(rows), ctx.policy.min_rows)
    return spec.estimator(**params).fit(whole.iloc[rows], schema, reference=whole).circuit_


def refitted(ctx: ClientContext, whole: Circuit, rows: np.ndarray, params: dict) -> Circuit:
    """A copy of ``whole`` (the client's circuit of all its rows) with its parameters refitted
    by ``CLUSTER_EM_PASSES`` passes of batch EM over ``rows`` (a cluster), the leaves' std floors
    those of all the client's rows: ``cluster_fit="refit"`` (``fedpc.defaults``). A node whose
    statistics would rest on fewer than the policy's ``min_rows`` of the cluster's rows (a sum with
    such an edge, a categorical leaf with such a state: ``em.resting``) keeps its parameters,
    fitted on at least that many of the client's rows (``em``'s ``keep_below``). Taking the
    marginal of the cluster's rows for a leaf below instead (``em``'s default) made breast
    cancer's 4 clusters of 10 columns 0.1 to 2.4 nats per row worse after one pass."""
    schema = whole.schema
    X = as_matrix(ctx.data.train[schema.names], schema)
    circuit = copy.deepcopy(whole)
    floors = std_floors(X, params.get("min_std_fraction", MIN_STD_FRACTION))  # (as ``whole`` was fitted)
    em_passes(circuit, X[rows], iterations=defaults.CLUSTER_EM_PASSES, floors=floors,
              alpha=params.get("alpha", ALPHA), min_rows=ctx.policy.min_rows, keep_below=True)
    return circuit


def standardised(x: np.ndarray) -> np.ndarray:
    """(rows, columns) -> the same with NaN -> column mean (0 for an all-NaN column), then
    each column to mean 0 and std 1 (a constant one to 0)."""
    x = np.where(np.isnan(x), np.nanmean(np.where(np.isnan(x).all(0), 0.0, x), axis=0), x)
    sd = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def kmeans(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    """(rows,) k-means labels of ``x`` (``standardised`` columns)."""
    if k == 1:
        return np.zeros(len(x), dtype=int)
    return KMeans(n_clusters=k, n_init=3, random_state=seed).fit_predict(standardised(x))


def clusters_of(ctx: ClientContext, names: list[str], k: int, seed: int, by_label: bool = False) -> np.ndarray:
    """Cluster labels of the client's rows on its own columns: k-means on all of them, or with
    ``by_label`` (aligned gluing) on a client holding the label, each class's rows apart (k
    split across classes by size, at least one each), so every cluster is pure in the label and
    the co-occurrence weights tie the label to the other clients' clusters. Not for random
    gluing: a random pairing of label-pure clusters invents a label dependence (breast cancer,
    vertical x2: accuracy 0.34)."""
    x = ctx.data.train[names].to_numpy(dtype=float)
    if k > len(x):
        raise FedpgmError(f"{k} clusters requested but client '{ctx.client_id}' has {len(x)} rows; "
                          "lower --clusters")
    label = ctx.data.schema.label
    if not by_label or label not in names:
        return kmeans(x, k, seed)
    y = ctx.data.train[label].to_numpy(dtype=float)
    values, counts = np.unique(y, return_counts=True)
    if len(values) > k:
        return kmeans(x, k, seed)
    share = np.maximum(1, np.floor(k * counts / counts.sum())).astype(int)
    share[np.argmax(counts)] += k - share.sum()  # the biggest class takes what rounding left
    out, offset = np.empty(len(x), dtype=int), 0
    for value, kc in zip(values, share):
        rows = np.flatnonzero(y == value)
        out[rows] = offset + kmeans(x[rows], min(int(kc), len(rows)), seed)
        offset += int(kc)
    return out


def merge_small(ctx: ClientContext, names: list[str], labels: np.ndarray, by_label: bool) -> np.ndarray:
    """Clusters renumbered 0..k'-1 after each cluster with fewer rows than the client's policy
    allows (``min_rows``) is merged into the one with the nearest centroid (standardised columns;
    with ``by_label``, one of the same class where there is one, so clusters stay label-pure).
    The reply notes any merge; a client with fewer rows in all than ``min_rows`` refuses."""
    floor = ctx.policy.min_rows
    ctx.require_rows(len(labels), "cluster circuits")
    x = standardised(ctx.data.train[names].to_numpy(dtype=float))
    label = ctx.data.schema.label
    y = ctx.data.train[label].to_numpy(dtype=float) if by_label and label in names else np.zeros(len(x))
    labels, before = labels.copy(), len(np.unique(labels))
    while True:
        ids, counts = np.unique(labels, return_counts=True)
        if counts.min() >= floor or len(ids) == 1:
            break
        small = ids[np.argmin(counts)]
        centre = x[labels == small].mean(0)
        klass = np.nanmedian(y[labels == small])
        others = [i for i in ids if i != small]
        same = [i for i in others if np.nanmedian(y[labels == i]) == klass] or others
        nearest = min(same, key=lambda i: float(((x[labels == i].mean(0) - centre) ** 2).sum()))
        labels[labels == small] = nearest
    labels = np.unique(labels, return_inverse=True)[1]
    if labels.max() + 1 < before:
        ctx.notes.append(f"clusters lowered from {before} to {labels.max() + 1} by the client's policy "
                         f"(min_rows {floor}: smaller clusters merged into their nearest)")
    return labels


@HANDLERS.train("fit", FIT)
def fit(request: Message, ctx: ClientContext) -> Message:
    cfg = request.config
    learner, params = cfg["learner"], dict(cfg["params"])
    ctx.require_rows(len(ctx.data.train), "a circuit")
    if cfg.get("memberships"):  # once per run: overlapping clusterings of known rows would difference
        if not ctx.policy.memberships:
            raise PolicyRefusal(f"client '{ctx.client_id}' sends no per-row cluster memberships (its policy); "
                                "use --glue random or combinatorial")
        if TOKENS in ctx.state:  # rows out of their cluster means (453 of 455 values, 62 fits)
            raise PolicyRefusal(f"client '{ctx.client_id}' sends cluster memberships once per run; start a new run")
        if SECRET not in ctx.state or not cfg["own"]:  # (checked first: a refused fit leaves no mark)
            raise PolicyRefusal(f"client '{ctx.client_id}' clusters for aligned gluing only columns of its own, "
                                "after the run's secret is shared")
    spec = learner_spec(learner)
    for name in spec.row_settings:  # the client's floor, whatever the server asked (None: auto, resolved later)
        requested = params.get(name, spec.default(name))
        if requested is not None:
            params[name] = ctx.floor(name, requested)
    # every leaf parameter (fitted, refitted by EM or trained by Adam, a histogram's edges) is a
    # statistic of min_rows rows, so EM is safe and no setting is lowered for it (every learner)
    params["min_leaf_rows"] = ctx.policy.min_rows
    start = time.process_time()
    arrays, entries = {}, []
    folder = ctx.workdir / FOLDER

    def add(key: str, circuit, n: int) -> None:
        doc, tensors = to_payload(circuit)
        save_payload(doc, tensors, folder / key)
        entry = {"key": key, "n": n}
        if cfg["send"]:
            arrays.update({f"{key}/{k}": v for k, v in tensors.items()})
            entry["doc"] = doc
        entries.append(entry)

    everything = np.arange(len(ctx.data.train))
    for i, names in enumerate(cfg["shared"]):
        add(f"shared{i}", learn(ctx, names, everything, learner, params), len(everything))
    if cfg["own"]:
        k = int(cfg["clusters"])
        by_label = bool(cfg.get("memberships"))
        labels = clusters_of(ctx, cfg["own"], k, int(params.get("seed", 0)), by_label=by_label)
        labels = merge_small(ctx, cfg["own"], labels, by_label)
        k = int(labels.max()) + 1
        refit = bool(cfg.get("refit")) and k > 1 and not spec.dense
        whole = learn(ctx, cfg["own"], everything, learner, params) if k > 1 and (refit or cfg.get("whole")) else None
        for c in range(k):
            rows = np.flatnonzero(labels == c)
            if len(rows) == 0:
                raise FedpgmError(f"cluster {c} of client '{ctx.client_id}' is empty; lower --clusters")
            if refit and whole is not None:
                add(f"cluster{c}", refitted(ctx, whole, rows, params), len(rows))
            else:
                add(f"cluster{c}", learn(ctx, cfg["own"], rows, learner, params), len(rows))
        if cfg.get("whole") and whole is not None:  # (aligned gluing's product of the clients: ``plan.glue``)
            add("whole", whole, len(everything))
        if cfg.get("memberships"):  # keyed by a hash only the parties can make (fedpgm.federation.secret)
            tokens = row_tokens(ctx, ctx.data.train.index)
            order = np.argsort(tokens)  # (in token order: a row's place says nothing of its id)
            ctx.state[TOKENS], ctx.state[LABELS] = tokens[order], labels[order].astype(np.uint64)
            arrays["memberships/ids"] = tokens[order]
    ctx.state["fedpc_keys"] = [e["key"] for e in entries]
    return Message("fit", arrays, {"circuits": entries, "seconds": time.process_time() - start})


@HANDLERS.query("cooccurrence", COOCCURRENCE)
def cooccurrence(request: Message, ctx: ClientContext) -> Message:
    """(rows,) uint64: for each of the ``rows`` (tokens every clustering party holds, at least the
    policy's ``min_rows``, each one of this client's), its cluster index times its weight (this
    party's entry of ``weights``, one per party the run's secret was dealt to, in their order)
    plus this party's ``cancelling_masks``, bound to a digest of the rows and the weights, in the
    order of a keyed hash of the tokens. Once per run, after a fit that clustered for aligned
    gluing. Parties given different rows or weights get masks that do not cancel: noise."""
    if TOKENS not in ctx.state:
        raise PolicyRefusal(f"client '{ctx.client_id}' has no clustering for aligned gluing in this run; "
                            "fit with memberships first")
    if ctx.state.get(COUNTED):
        raise PolicyRefusal(f"client '{ctx.client_id}' sends masked cluster indices once per run; start a new run")
    parties, weights = list(ctx.state[PARTIES]), [int(w) for w in request.config["weights"]]
    if len(weights) != len(parties):
        raise PolicyRefusal(f"client '{ctx.client_id}' needs one weight per party the run's secret was dealt "
                            f"to ({len(parties)}), got {len(weights)}")
    rows, tokens = request.arrays["rows"], ctx.state[TOKENS]
    if rows.ndim != 1 or rows.dtype != np.uint64:
        raise PolicyRefusal(f"client '{ctx.client_id}' takes rows as a flat uint64 array of tokens, got "
                            f"{rows.dtype} of shape {rows.shape}")
    at = np.minimum(np.searchsorted(tokens, rows), len(tokens) - 1)
    if len(np.unique(rows)) != len(rows) or not (tokens[at] == rows).all():
        raise PolicyRefusal(f"client '{ctx.client_id}' counts only rows it holds, each once; the request "
                            "names others or repeats one")
    ctx.require_rows(len(rows), "co-occurrence counts")
    ctx.state[COUNTED] = True
    binding = hashlib.sha256(np.sort(rows).tobytes() + repr(weights).encode()).digest()
    order = np.argsort(keyed_hashes(ctx, (f"order\x00{binding.hex()}\x00{t}" for t in rows.tolist())))
    weight = np.uint64(weights[parties.index(ctx.client_id)])
    masked = ctx.state[LABELS][at[order]] * weight + cancelling_masks(ctx, rows[order], binding)
    return Message("cooccurrence", {"masked": masked})


def answers_em(ctx: ClientContext) -> bool:
    """Whether the client answers ``em``: its policy's ``em``, by default where it does not run on
    a deployed node (the coordinator is then this user's own process), and never under a policy
    that requires DP (``Contract.sent_model``)."""
    allowed = ctx.policy.em if ctx.policy.em is not None else not ctx.deployed
    return allowed and ctx.policy.max_epsilon is None


def holdout_rows(n: int, share: float, floor: int) -> np.ndarray:
    """(n,) bool: the rows EM's statistics leave out to score each pass: a ``share`` of them, at
    least ``floor`` (the policy's ``min_rows``), drawn by the client (a fixed seed: the same
    rows in every request, none chosen by the server); none where fewer than ``floor`` would be
    left, or where ``share`` is 0."""
    held = np.zeros(n, dtype=bool)
    size = max(int(round(share * n)), floor) if share > 0 else 0
    if size and n - size >= floor:
        held[np.random.default_rng(0).choice(n, size, replace=False)] = True
    return held


@HANDLERS.train("em", EM)
def em(request: Message, ctx: ClientContext) -> Message:
    """One pass of federated EM (module doc): the circuit's expected statistics over this
    client's rows outside its held-out rows (``EM_HOLDOUT`` of them, the same in every request),
    each resting on ``min_rows`` rows, by node (``circuits.em.resting``; arrays "stats/..."), the
    columns' std floors ("floors"; ``MIN_STD`` for a column of fewer than ``min_rows`` observed
    values), and one bit: whether the circuit scores better on the held-out rows than the one
    sent before it in this run ("better"; None for the first, or without held-out rows). The
    score itself never leaves: a sum over rows of a function the server chose, it could be
    nearly constant but for one row. At most ``EM_REQUESTS`` requests per run."""
    cfg = request.config
    if not answers_em(ctx):
        raise PolicyRefusal(f"client '{ctx.client_id}' sends EM statistics of a circuit it is sent only where its "
                            "policy sets em true (on a deployed node the coordinator chooses the circuit: "
                            "docs/security.md); fit with --refine-passes 0")
    ctx.require_rows(len(ctx.data.train), "EM statistics")
    answered = int(ctx.state.get(EM_COUNT, 0))
    if answered >= EM_REQUESTS:
        raise PolicyRefusal(f"client '{ctx.client_id}' answers {EM_REQUESTS} EM requests per run (one bit each); "
                            "start a new run")
    tensors = {k[len("circuit/"):]: v for k, v in request.arrays.items()}
    circuit, _ = from_payload(cfg["circuit"], tensors, "the circuit sent for EM")
    if circuit.dense:
        raise PolicyRefusal(f"client '{ctx.client_id}' computes EM statistics of node circuits only")
    names = circuit.schema.names
    missing = [n for n in names if n not in ctx.data.schema.names]
    if missing:
        raise PolicyRefusal(f"client '{ctx.client_id}' does not hold column(s) {missing[:5]} of the circuit sent")
    start = time.process_time()
    X = ctx.data.train[names].to_numpy(dtype=float)
    floor = ctx.policy.min_rows
    held = holdout_rows(len(X), EM_HOLDOUT, floor)
    cc = CompiledCircuit(circuit, dtype=E_STEP_DTYPE)
    stats, _ = expected_statistics(circuit, cc, X[~held], weigh=True, splits=True)
    arrays = {f"stats/{k}": v for k, v in resting(circuit, cc, stats, floor).items()}
    arrays["floors"] = np.where((~np.isnan(X)).sum(0) >= floor, std_floors(X), MIN_STD)
    config: dict = {"n": int((~held).sum()), "n_holdout": int(held.sum()), "better": None}
    if held.any():
        values = cc.forward(cc.tensor(X[held]))  # (the E-step's float32 pass, summed in float64)
        score = float(values[cc.root].sum(dtype=torch.float64))
        if EM_SCORE in ctx.state:
            config["better"] = score > float(ctx.state[EM_SCORE])
        ctx.state[EM_SCORE] = score
    ctx.state[EM_COUNT] = answered + 1
    config["seconds"] = time.process_time() - start
    return Message("em", arrays, config)


@HANDLERS.query("loglik", LOGLIK)
def loglik(request: Message, ctx: ClientContext) -> Message:
    """(rows, circuits) log-likelihoods of the kept circuits on the query rows sent."""
    keys = ctx.state.get("fedpc_keys")
    if not keys:
        raise FedpgmError(f"client '{ctx.client_id}' holds no FedPC circuits; fit first")
    names = request.config["columns"]
    X = request.arrays["X"]
    out = np.empty((len(X), len(keys)))
    for i, key in enumerate(keys):
        circuit, _ = load_circuit(ctx.workdir / FOLDER / key)
        out[:, i] = log_likelihood_of(circuit, names, X)
    return Message("loglik", {"loglik": out}, {"keys": keys})


@HANDLERS.train("fit_tree", FIT_TREE)
def fit_tree(request: Message, ctx: ClientContext) -> Message:
    """FC[DT]: this client's expert (bagged or boosted trees, ``fedpc.experts``) on its columns and
    labelled rows, and with ``reference_columns`` a second one on those (shared) columns only, as
    arrays."""
    cfg = request.config
    schema = ctx.data.schema
    if schema.label is None:
        raise FedpgmError(f"client '{ctx.client_id}' holds no label; it cannot fit an FC[DT] tree")
    start = time.process_time()
    leaf = cfg.get("min_samples_leaf")
    leaf = None if leaf is None else ctx.floor("min_samples_leaf", leaf)
    ctx.require_rows(len(ctx.data.train), "trees")
    shared = list(cfg.get("reference_columns") or [])
    fits = [schema] + ([schema.select(shared + [schema.label])] if shared else [])
    experts = [Expert.fit(ctx.data.train, s, cfg.get("ensemble", "bagging"), cfg["max_depth"],
                          None if leaf is None else int(leaf), int(cfg["seed"]), int(cfg.get("trees", 1)),
                          min_leaf=ctx.policy.min_rows)
               for s in fits]
    msg = expert_message(*experts)
    msg.config["seconds"] = time.process_time() - start
    return msg

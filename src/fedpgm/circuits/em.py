"""Expectation-maximisation for the parameters of any circuit (structure fixed).

E-step: one upward pass and one top-down ``flows`` pass give, per row, the posterior
probability that each sum edge and each leaf is used; summed over rows these are expected
counts, and each leaf accumulates its type's weighted sufficient statistics (rows where its
variable is missing carry no weight). M-step: sum weights = normalised edge counts (plus a
tiny constant, so none is exactly 0); leaves refit from their statistics. Batch EM uses all
rows per iteration; mini-batch (stepwise, online) EM keeps running statistics updated after
every batch with step size (t + 2)^-decay (Liang and Klein 2009). EM stops in a local optimum
that depends on the initialisation, so ``em_best_of`` trains several and keeps the best fit.

A floor of ``min_rows`` rows (a FedPC client's privacy policy; 1: none) holds in every M-step: a
leaf whose weights over the rows (its posteriors, observed values only; in stepwise EM the
running statistics' weights) rest on fewer (sum w < min_rows x max w: no row carries over
1/min_rows of the weight, so Kish's (sum w)^2 / sum w^2 is at least min_rows too) takes the
statistics of all rows of its variable instead (the marginal, scaled to its weight sum; with
fewer observed rows than that, none: a leaf of no data), and a sum whose flow rests on fewer
keeps its weights. With ``keep_below`` every node whose statistics ``resting`` would leave out
(below the floor, a sum with an edge below it, a categorical or Bernoulli leaf with a state below
it, a leaf of another discrete type) keeps its parameters. Stepwise EM bounds a row's
running weight by the sum, over sweeps (a row is in one batch per sweep), of the largest decayed
weight of the sweep's batches; so no parameter EM writes rests on fewer than ``min_rows`` rows.

The E-step's upward and top-down passes run in float32 by default (``E_STEP_DTYPE``): the flows
are posterior probabilities, kept to about 1e-6 relative, and what is summed from them (edge
counts, the leaves' statistics over the float64 data) is summed in float64. On plants (the
chosen Chow-Liu model of docs/circuits.md, 17,911 nodes) five passes scored the same validation
and test log-likelihoods to 1e-6 as float64 passes, at 1.7-2x the speed.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from fedpgm.circuits.compiled import CompiledCircuit
from fedpgm.circuits.leaves import ALPHA, leaf_type
from fedpgm.circuits.weighted import std_floors
from fedpgm.circuits.queries import log_likelihood
from fedpgm.circuits.structure import Circuit, Leaf, Sum
from fedpgm.errors import FedpgmError

SMOOTH = 1e-6
MAX_CELLS = 20_000_000  # node values per chunk of rows
DEADLINE_CHUNKS = 8  # with a deadline, an E-step takes its rows in at least this many chunks
E_STEP_DTYPE = torch.float32


class PastDeadline(Exception):
    """An E-step stopped at its deadline before its next chunk (``expected_statistics``)."""


def expected_statistics(circuit: Circuit, cc: CompiledCircuit, X: np.ndarray, weigh: bool = False,
                        deadline: float | None = None, splits: bool = False) -> tuple[dict, float]:
    """{("edge", layer) or ("leaf", node): statistics} summed over rows (float64), and the total LL.
    Chunks of rows are summed as one array per sum layer and per leaf group, split per leaf once.
    ``weigh``: also {("mass" or "top", "sum" or "leaf", layer or group): (nodes,)} each node's
    weight sum and largest weight of a row (for the floor). ``splits`` (with ``weigh``): also, for
    the floor of each edge and state (``resting``), {("top", "edge", layer): (edges,)} each
    edge's largest use by one row and {("square", node): statistics} each leaf's statistics under
    the squared weights.
    ``deadline`` (a ``time.perf_counter()`` time): the rows go in at least ``DEADLINE_CHUNKS``
    chunks, and no chunk predicted to end after it (as long as the slowest chunk yet) starts:
    ``PastDeadline`` instead, so a whole-batch pass stops within about an eighth of its time of
    its deadline."""
    edges: dict[int, np.ndarray] = {}
    groups: list[np.ndarray | None] = [None] * len(cc.groups)
    squared: list[np.ndarray | None] = [None] * len(cc.groups)
    stats_top: dict[int, np.ndarray] = {}  # sum layer -> each edge's largest use by one row (``splits``)
    params = [[circuit.nodes[node_id].params for node_id in g.nodes] for g in cc.groups]  # type: ignore[union-attr]
    columns = [g.vars.cpu().numpy() for g in cc.groups]
    mass: dict = {}
    total = 0.0
    step = max(1, MAX_CELLS // max(cc.n_nodes + sum(len(l.child) for l in cc.layers), 1))
    if deadline is not None:
        step = min(step, max(1, -(-len(X) // DEADLINE_CHUNKS)))
    slowest = 0.0
    for lo in range(0, len(X), step):
        began = time.perf_counter()
        if deadline is not None and began + slowest > deadline:
            raise PastDeadline(f"the E-step reached its deadline after {lo} of {len(X)} rows")
        rows = X[lo: lo + step]
        values = cc.forward(cc.tensor(rows))
        edge_tops: list | None = [None] * len(cc.layers) if splits else None
        flow, edge_counts = cc.flows(values, edge_tops)
        total += float(values[cc.root].sum(dtype=torch.float64))
        for k, counts in enumerate(edge_counts):
            if counts is not None:
                edges[k] = edges[k] + counts if k in edges else counts
                if weigh:
                    f = flow[cc.layers[k].start:cc.layers[k].end]
                    add_mass(mass, ("sum", k), f.sum(1, dtype=torch.float64).cpu().numpy(),
                             f.amax(1).double().cpu().numpy())
                if splits:
                    top = edge_tops[k]  # type: ignore[index]
                    stats_top[k] = np.maximum(stats_top[k], top) if k in stats_top else top
        for i, g in enumerate(cc.groups):
            w = flow[g.start:g.end].double().cpu().numpy()
            part = leaf_type(g.dist).group_stats(rows[:, columns[i]], w, params[i])
            groups[i] = part if groups[i] is None else groups[i] + part
            if splits:
                part = leaf_type(g.dist).group_stats(rows[:, columns[i]], w * w, params[i])
                squared[i] = part if squared[i] is None else squared[i] + part
            if weigh:
                w = np.where(np.isnan(rows[:, columns[i]].T), 0.0, w)
                add_mass(mass, ("leaf", i), w.sum(1), w.max(1))
        slowest = max(slowest, time.perf_counter() - began)
    stats: dict = {("edge", k): v for k, v in edges.items()}
    for g, summed, sq in zip(cc.groups, groups, squared):
        if summed is not None:  # (None: no rows)
            stats.update({("leaf", node_id): row for node_id, row in zip(g.nodes, summed)})
        if sq is not None:
            stats.update({("square", node_id): row for node_id, row in zip(g.nodes, sq)})
    for key, (sums, tops) in mass.items():
        stats[("mass",) + key], stats[("top",) + key] = sums, tops
    stats.update({("top", "edge", k): top for k, top in stats_top.items()})
    return stats, total


def add_mass(mass: dict, key: tuple, sums: np.ndarray, tops: np.ndarray) -> None:
    """Add a chunk's weight sums and largest weights, (nodes,) each, to ``mass[key]``."""
    mass[key] = (mass[key][0] + sums, np.maximum(mass[key][1], tops)) if key in mass else (sums, tops)


def marginal_statistics(circuit: Circuit, cc: CompiledCircuit, X: np.ndarray, min_rows: int) -> list[np.ndarray]:
    """Per leaf group (L, S): each leaf's statistics over all rows of X with weight 1 per row,
    divided by the rows observing its variable (0 where fewer than ``min_rows`` do): what a leaf
    below the floor takes, times its weight sum."""
    out = []
    for g in cc.groups:
        cols, kind = g.vars.cpu().numpy(), leaf_type(g.dist)
        params = [circuit.nodes[node_id].params for node_id in g.nodes]  # type: ignore[union-attr]
        step = max(1, MAX_CELLS // max(len(cols), 1))
        total = sum(kind.group_stats(X[lo: lo + step, cols], np.broadcast_to(1.0, (len(cols), len(X[lo: lo + step]))),
                                     params) for lo in range(0, len(X), step))
        seen = (~np.isnan(X[:, cols])).sum(0)
        out.append(np.where((seen >= min_rows)[:, None], total / np.maximum(seen, 1)[:, None], 0.0))
    return out


def floored(circuit: Circuit, cc: CompiledCircuit, stats: dict, marginal: list[np.ndarray], min_rows: int) -> dict:
    """``stats`` (with "mass" and "top" entries) where every leaf and sum rests on ``min_rows``
    rows: a leaf below takes ``marginal`` (of ``marginal_statistics``) times its weight sum, a sum
    its current weights times its flow (module doc)."""
    out = dict(stats)
    for k, layer in enumerate(cc.layers):
        sums = stats.get(("mass", "sum", k))
        if sums is not None and (low := sums < min_rows * stats[("top", "sum", k)]).any():
            parent = layer.parent.cpu().numpy()
            old = np.concatenate([circuit.nodes[node_id].weights for node_id in layer.nodes])  # type: ignore[union-attr]
            out[("edge", k)] = np.where(low[parent], sums[parent] * old, stats[("edge", k)])
    for i, j, node_id in below_floor(cc, stats, min_rows):
        out[("leaf", node_id)] = marginal[i][j] * stats[("mass", "leaf", i)][j]
    return out


def resting(circuit: Circuit, cc: CompiledCircuit, stats: dict, min_rows: int) -> dict[str, np.ndarray]:
    """``by_node``'s statistics (from ``expected_statistics(weigh=True, splits=True)``) of the
    nodes whose weights rest on at least ``min_rows`` rows, for statistics of a circuit someone
    else chose: a sum or leaf below (fewer rows, or none) is left out, and so that narrow
    children cannot make a sum's edge counts a histogram of single rows, each edge must rest on
    them too. A categorical or Bernoulli leaf (with ``squares`` statistics)
    must also rest on ``min_rows`` rows in each of its states, by Kish's effective count (sum
    w)^2 / sum w^2, so that a state held by one row does not carry that row's weight (a function
    of its other values). Where one edge or state is below, every edge of that sum (state of that
    leaf) takes its current weight times the node's flow: the split is then the server's own,
    and no kept sibling can be subtracted from the total to give the low one. The statistics of
    other leaf types are left out: the server keeps those leaves. What is left out says only
    that fewer than ``min_rows`` rows reach a node."""
    out = by_node(circuit, cc, stats)
    for k, layer in enumerate(cc.layers):
        if ("top", "edge", k) not in stats:
            continue
        parent = layer.parent.cpu().numpy()
        counts, flow = stats[("edge", k)], stats[("mass", "sum", k)]
        low_edge = counts < min_rows * stats[("top", "edge", k)]  # (a count of 0: no row, and none to read)
        low_sum = (flow < min_rows * stats[("top", "sum", k)]) | (flow <= 0)
        for i, node_id in enumerate(layer.nodes):
            edges = parent == i
            if low_sum[i]:
                del out[f"sum/{node_id}"]
            elif low_edge[edges].any():
                out[f"sum/{node_id}"] = flow[i] * circuit.nodes[node_id].weights  # type: ignore[union-attr]
    for _, _, node_id in below_floor(cc, stats, min_rows):
        out.pop(f"leaf/{node_id}", None)
    for key in [k for k in out if k.startswith("leaf/")]:
        node = circuit.nodes[int(key[5:])]
        assert isinstance(node, Leaf)  # (a leaf key names a leaf)
        if node.dist != "gaussian":  # (a Gaussian's moments are of the whole leaf: floored above)
            kept = state_floor(node, out[key], stats.get(("square", int(key[5:]))), min_rows)
            if kept is None:
                del out[key]
            else:
                out[key] = kept
    return out


def state_floor(leaf: Leaf, counts: np.ndarray, squares: np.ndarray | None, min_rows: int) -> np.ndarray | None:
    """A categorical or Bernoulli leaf's statistics ``counts``, or where any state rests on fewer
    than ``min_rows`` rows (Kish's count from ``squares``, the statistics under squared weights;
    a state no row reaches counts 0) every state at the leaf's current probability times its
    weight (``resting``); None for other types."""
    if squares is None or leaf.dist not in ("categorical", "bernoulli"):
        return None
    if leaf.dist == "bernoulli":  # ([rows, ones] -> per state: zeros, ones)
        counts, squares = np.array([counts[0] - counts[1], counts[1]]), np.array([squares[0] - squares[1], squares[1]])
        probs = np.array([1.0 - float(leaf.params["p"]), float(leaf.params["p"])])
    else:
        probs = np.zeros(len(counts))
        probs[:len(leaf.params["probs"])] = leaf.params["probs"]
    if (counts * counts < min_rows * squares).any():  # (a count of 0: no row, and none to read)
        counts = counts.sum() * probs
    return np.array([counts.sum(), counts[1]]) if leaf.dist == "bernoulli" else counts


def below_floor(cc: CompiledCircuit, stats: dict, min_rows: int) -> list[tuple[int, int, int]]:
    """(group, position in it, node id) of every leaf whose weights in ``stats`` (with "mass" and
    "top" entries) rest on fewer than ``min_rows`` rows (module doc)."""
    out = []
    for i, g in enumerate(cc.groups):
        if ("mass", "leaf", i) in stats:
            sums = stats[("mass", "leaf", i)]
            low = (sums < min_rows * stats[("top", "leaf", i)]) | (sums <= 0)
            out += [(i, int(j), g.nodes[j]) for j in np.flatnonzero(low)]
    return out


def by_node(circuit: Circuit, cc: CompiledCircuit, stats: dict) -> dict[str, np.ndarray]:
    """``stats`` keyed by node instead of by compiled layer, so that another process that compiles
    the same circuit can use them (``by_layer``): {"sum/ID": (children,) edge counts, "leaf/ID":
    the leaf's statistics}; "mass" and "top" entries are left out."""
    out: dict[str, np.ndarray] = {}
    for k, layer in enumerate(cc.layers):
        if ("edge", k) in stats:
            offset = 0
            for node_id in layer.nodes:
                width = len(circuit.nodes[node_id].children)  # type: ignore[union-attr]
                out[f"sum/{node_id}"] = np.asarray(stats[("edge", k)][offset: offset + width], dtype=np.float64)
                offset += width
    out.update({f"leaf/{key[1]}": np.asarray(v, dtype=np.float64) for key, v in stats.items() if key[0] == "leaf"})
    return out


def by_layer(circuit: Circuit, cc: CompiledCircuit, named: dict[str, np.ndarray]) -> dict:
    """``by_node``'s statistics back in ``m_step``'s keys for this process's compiled ``cc``; a
    sum ``named`` lacks keeps its weights."""
    stats: dict = {}
    for k, layer in enumerate(cc.layers):
        if layer.kind == "sum":
            kept = [circuit.nodes[node_id].weights for node_id in layer.nodes]  # type: ignore[union-attr]
            stats[("edge", k)] = np.concatenate([named.get(f"sum/{node_id}", w)
                                                 for node_id, w in zip(layer.nodes, kept)])
    stats.update({("leaf", int(key[5:])): v for key, v in named.items() if key.startswith("leaf/")})
    return stats


def m_step(circuit: Circuit, cc: CompiledCircuit, stats: dict, floors: np.ndarray, alpha: float = ALPHA) -> None:
    """Write the parameters that maximise the expected log-likelihood into ``circuit`` and its
    compiled ``cc`` (continuous leaves' stds at least ``floors[variable]``, ``alpha`` pseudo-counts
    per state or bin)."""
    for k, layer in enumerate(cc.layers):
        if layer.kind != "sum":
            continue
        counts = stats[("edge", k)] + SMOOTH
        parent = layer.parent.cpu().numpy()
        new = counts / np.bincount(parent, weights=counts)[parent]
        offset = 0
        for node_id in layer.nodes:
            node = circuit.nodes[node_id]
            assert isinstance(node, Sum)  # (a sum layer holds sums)
            node.weights = new[offset: offset + len(node.children)].copy()
            offset += len(node.children)
    for key, value in stats.items():
        if key[0] == "leaf":
            node = circuit.nodes[key[1]]
            node.params = leaf_type(node.dist).from_stats(value, node.params, floors[node.var], alpha)
    cc.reload_parameters()


def em(circuit: Circuit, X: np.ndarray, iterations: int = 10, batch_size: int | None = None,
       decay: float = 0.6, seed: int = 0, tol: float = 1e-6, progress=None,
       floors: np.ndarray | None = None, alpha: float = ALPHA, min_rows: int = 1,
       deadline: float | None = None, keep_below: bool = False) -> list[float]:
    """Refine ``circuit``'s parameters in place; returns the mean train log-likelihood of
    each pass (under the parameters at the start of that pass). ``alpha``: the leaves'
    pseudo-count per state or bin in every M-step; ``min_rows``: the floor (module doc);
    ``keep_below`` (batch EM only): a node below it keeps its parameters, as ``resting`` floors
    the statistics of a circuit someone else chose (module doc; for a circuit refitted on a
    subset of the rows it was learned on: a cluster's, in ``fedpc.client.refitted``).

    ``batch_size=None``: batch EM. Otherwise stepwise EM over shuffled mini-batches.
    ``deadline`` (a ``time.perf_counter()`` time): no pass, and no mini-batch predicted to end
    after it (as long as the slowest batch yet), starts, and a whole-batch pass stops at it
    between chunks of its E-step (``expected_statistics``); a pass cut short is left out of the
    history (the circuit holds its batches' updates so far; a whole-batch pass changes nothing).
    """
    if iterations < 1:
        raise FedpgmError(f"iterations must be >= 1, got {iterations}")
    if batch_size is not None and batch_size < 1:
        raise FedpgmError(f"batch_size must be >= 1, got {batch_size}")
    if keep_below and batch_size is not None:
        raise FedpgmError("keep_below floors batch EM only; use batch_size=None")
    X = np.asarray(X, dtype=float)
    floors = std_floors(X) if floors is None else floors
    rng = np.random.default_rng(seed)
    history: list[float] = []
    running: dict | None = None
    step = 0
    cc = CompiledCircuit(circuit, dtype=E_STEP_DTYPE)  # (compiled once; each M-step's parameters reloaded)
    marginal = marginal_statistics(circuit, cc, X, min_rows) if min_rows > 1 and not keep_below else []
    closed: dict = {}  # stepwise EM with a floor: the bound on a row's running weight from past sweeps

    def update(stats: dict) -> None:
        if keep_below and min_rows > 1:
            stats = by_layer(circuit, cc, resting(circuit, cc, stats, min_rows))
        elif min_rows > 1:
            stats = floored(circuit, cc, stats, marginal, min_rows)
        m_step(circuit, cc, stats, floors, alpha)

    slowest = 0.0  # seconds of the slowest mini-batch yet

    def late() -> bool:
        return deadline is not None and time.perf_counter() + slowest > deadline

    for it in range(iterations):
        if late():
            break
        if batch_size is None:
            try:
                stats, total = expected_statistics(circuit, cc, X, min_rows > 1, deadline, splits=keep_below)
            except PastDeadline:
                break
            update(stats)
        else:
            total = 0.0
            order = rng.permutation(len(X))
            sweep: dict = {}  # the largest decayed weight of a row in this sweep's batches
            for lo in range(0, len(X), batch_size):
                if late():
                    return history
                began = time.perf_counter()
                rows = order[lo: lo + batch_size]
                stats, ll = expected_statistics(circuit, cc, X[rows], min_rows > 1)
                total += ll
                scale, eta = len(X) / len(rows), (step + 2) ** (-decay) if running is not None else 1.0
                stats = {k: v * scale for k, v in stats.items()}
                tops = {k: stats.pop(k) for k in list(stats) if k[0] == "top"}
                running = stats if running is None else {
                    k: (1 - eta) * running[k] + eta * stats[k] for k in stats}
                closed = {k: (1 - eta) * v for k, v in closed.items()}
                sweep = {k: np.maximum((1 - eta) * sweep[k], eta * v) if k in sweep else eta * v
                         for k, v in tops.items()}
                update({**running, **{k: v + closed.get(k, 0.0) for k, v in sweep.items()}})
                step += 1
                slowest = max(slowest, time.perf_counter() - began)
            closed = {k: v + closed.get(k, 0.0) for k, v in sweep.items()}
        history.append(total / len(X))
        if progress is not None:
            progress(it, history[-1])
        if len(history) > 1 and abs(history[-1] - history[-2]) < tol:
            break
    return history


def em_best_of(initialise, X: np.ndarray, restarts: int, iterations: int, batch_size: int | None = None,
               floors: np.ndarray | None = None, seed: int = 0,
               min_rows: int = 1) -> tuple[float, Circuit, list[float]]:
    """EM from ``restarts`` initialisations, ``initialise(r)`` -> a fresh circuit for r = 0, 1,
    ... (mini-batch order from ``seed + r``); returns (mean training log-likelihood, circuit, EM
    history) of the best, as k-means keeps the best of its ``n_init``; ``min_rows``: ``em``'s floor."""
    if restarts < 1:
        raise FedpgmError(f"restarts must be >= 1, got {restarts}")
    best: tuple[float, Circuit, list[float]] | None = None
    for r in range(restarts):
        circuit = initialise(r)
        history = em(circuit, X, iterations, batch_size, seed=seed + r, floors=floors, min_rows=min_rows)
        fit = float(log_likelihood(CompiledCircuit(circuit), X).mean())
        if best is None or fit > best[0]:
            best = (fit, circuit, history)
    assert best is not None  # (restarts >= 1)
    return best

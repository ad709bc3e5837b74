"""LearnSPN (Gens and Domingos 2013), with RDC variable splits as in Mixed SPNs (Molina et al.
2018): a top-down recursion over slices of rows x variables.

For a slice: one variable -> a leaf; fewer than ``min_instances_slice`` rows -> a product of
leaves (naive factorisation); constant variables split off as leaves first; else the RDC
graph over the slice's variables (edges where RDC > ``threshold``) is cut into connected
components -> a product over them; if it is connected, k-means (k=2) splits the rows -> a sum
weighted by the cluster sizes. Missing values (NaN) are ignored by leaf fits and replaced by
the slice mean for RDC and clustering. ``leaf="histogram"`` gives the Mixed-SPN variant
(piecewise-constant continuous leaves).

``leaf_model="chow-liu"``: a slice that stops splitting models its discrete variables by a
Chow-Liu forest (``fedpgm.circuits.chow_liu``; trees, as ID-SPN's leaves are networks) instead of
independent leaves; its continuous variables keep univariate leaves. ``leaf_model="latent-tree"``:
the slice's discrete variables by a latent Chow-Liu tree with ``latent_states`` hidden states per
variable (``fedpgm.circuits.latent_tree``), which needs EM passes to pay off; with
``min_instances_slice`` above the rows, the whole table is one latent tree (an HCLT).

``by_label=True`` (with a labelled schema) makes the root a sum over the label's values, each
child the product of the label's leaf and a circuit learned on that class's rows: a generative
classifier p(y) p(x | y) whose every class gets its own structure. Plain LearnSPN may never
split on the label (RDC can cut it off as an almost independent leaf), which costs accuracy.
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
from scipy.sparse.csgraph import connected_components
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning

from fedpgm.circuits.chow_liu import add_tree, chow_liu
from fedpgm.circuits.latent_tree import LATENT_STATES, add_latent_tree, floor_cpts
from fedpgm.circuits.leaves import ALPHA, CONTINUOUS_LEAVES, default_leaf, leaf_type
from fedpgm.circuits.weighted import floored_values, std_floors
from fedpgm.circuits.rdc import onehot, rdc_matrix, restrict_order
from fedpgm.circuits.structure import Circuit
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError
from fedpgm.threads import threads_for

LEAF_MODELS = ("univariate", "chow-liu", "latent-tree")  # how a slice that stops splitting is modelled


class LearnSPNBuilder:
    """LearnSPN's recursion (Gens & Domingos, 2013) as a work list: split columns by RDC
    independence, else rows by clustering, until a slice has fewer than ``min_instances_slice`` rows;
    builds a ``Circuit``."""
    def __init__(self, schema: Schema, X: np.ndarray, min_instances_slice: int, threshold: float,
                 leaf: str, seed: int, floors: np.ndarray, progress=None, min_leaf_rows: int = 1,
                 leaf_model: str = "univariate", alpha: float = ALPHA, row_clusters: int = 2,
                 latent_states: int = LATENT_STATES, deadline: float = math.inf) -> None:
        self.c = Circuit(schema)
        self.X = X
        self.floors = floors
        self.cards = [f.cardinality for f in schema.features]
        self.min_instances, self.threshold, self.leaf = min_instances_slice, threshold, leaf
        self.rng = np.random.default_rng(seed)
        self.progress = progress
        self.min_leaf_rows = min_leaf_rows
        self.leaf_model = leaf_model
        self.alpha, self.row_clusters, self.latent_states = alpha, row_clusters, latent_states
        self.complete = not np.isnan(X).any()  # slices then keep their rows' sort orders
        self.deadline = deadline  # (a time.perf_counter() time)

    def late(self) -> bool:
        """Whether the deadline has passed: no slice is split any more, each ends in independent leaves."""
        return time.perf_counter() > self.deadline

    def leaf_of(self, rows: np.ndarray, var: int) -> int:
        """A leaf of ``var`` fitted to the slice's observed values (NaN ignored), or where they are
        fewer than ``min_leaf_rows`` to the column's (``floored_values``); returns its id."""
        feat = self.c.schema.features[var]
        dist = default_leaf(feat.kind, self.leaf)
        x = self.X[rows, var]
        x = x[~np.isnan(x)]
        w = np.ones(len(x))
        if self.min_leaf_rows > 1:
            column = self.X[:, var]
            x, w = floored_values(x, w, column[~np.isnan(column)], self.min_leaf_rows)
        return self.c.leaf(var, dist, leaf_type(dist).fit(x, w, feat.cardinality, self.floors[var], self.alpha,
                                                          self.min_leaf_rows))

    def naive(self, rows: np.ndarray, scope: list[int]) -> int:
        """The slice's end: independent leaves, or (``leaf_model`` "chow-liu" / "latent-tree") a
        Chow-Liu forest / latent tree over its discrete variables times leaves of the continuous ones."""
        discrete = [v for v in scope if self.cards[v] > 0]
        tree = self.leaf_model != "univariate" and len(discrete) > 1 and not self.late()
        alone = [v for v in scope if not (tree and v in discrete)]
        parts = [self.leaf_of(rows, v) for v in alone]
        if tree:
            latent = self.leaf_model == "latent-tree"  # (every edge kept: the hidden states may use it)
            data, cards = self.X[np.ix_(rows, np.asarray(discrete))], [self.cards[v] for v in discrete]
            parent, cpts = chow_liu(data, cards, self.alpha, **({"penalty": 0.0} if latent else {}))
            if self.min_leaf_rows > 1:
                cpts = floor_cpts(data, cards, parent, cpts, self.alpha, self.min_leaf_rows)
            parts += (add_latent_tree(self.c, discrete, parent, cpts, self.latent_states, self.rng) if latent
                      else add_tree(self.c, discrete, parent, cpts))
        return parts[0] if len(parts) == 1 else self.c.product(parts)

    def slice(self, rows: np.ndarray, scope: list[int]) -> np.ndarray:
        data = self.X[np.ix_(rows, np.asarray(scope, dtype=int))]
        if np.isnan(data).any():
            means = np.nanmean(np.where(np.isnan(data).all(axis=0), 0.0, data), axis=0)
            data = np.where(np.isnan(data), means, data)
        return data

    def learn(self, rows: np.ndarray, scope: list[int], order: np.ndarray | None = None) -> int:
        """The circuit of the slice ``rows`` x ``scope``; ``order``: (scope, rows) orders sorting each
        of its columns, handed down from the parent slice (complete data only; None: sorted here)."""
        if self.progress is not None:
            self.progress()
        if len(scope) == 1 or len(rows) < self.min_instances or self.late():
            return self.naive(rows, scope)
        data = self.slice(rows, scope)
        constant = np.ptp(data, axis=0) == 0
        if constant.any():
            fixed = [v for v, k in zip(scope, constant) if k]
            rest = [v for v, k in zip(scope, constant) if not k]
            children = [self.leaf_of(rows, v) for v in fixed]
            if rest:
                children.append(self.learn(rows, rest, None if order is None else order[~constant]))
            return children[0] if len(children) == 1 else self.c.product(children)
        if order is None and self.complete:
            order = np.argsort(data.T, axis=1)
        with threads_for(data.size):
            rdc = rdc_matrix(data, [self.cards[v] for v in scope], seed=int(self.rng.integers(2**31)), order=order)
        n_comp, labels = connected_components(rdc > self.threshold, directed=False)
        if n_comp > 1:
            return self.c.product([self.learn(rows, [v for v, l in zip(scope, labels) if l == g],
                                              None if order is None else order[labels == g])
                                   for g in range(n_comp)])
        clusters = self.cluster(data, scope)
        keeps = [clusters == k for k in np.unique(clusters)]
        if len(keeps) < 2 or min(int(keep.sum()) for keep in keeps) < max(1, self.min_leaf_rows):
            return self.naive(rows, scope)
        return self.c.sum([self.learn(rows[keep], scope, None if order is None else restrict_order(order, keep))
                           for keep in keeps], np.array([keep.sum() for keep in keeps]) / len(rows))

    def learn_by_label(self, rows: np.ndarray, label: int) -> int:
        """A sum over the label's observed values of (label leaf) x (circuit of the rest)."""
        y = self.X[rows, label]
        rest = [v for v in range(self.X.shape[1]) if v != label]
        values, counts = np.unique(y[~np.isnan(y)], return_counts=True)
        if len(values) < 2 or not rest or counts.min() < self.min_leaf_rows:
            return self.learn(rows, list(range(self.X.shape[1])))
        children, sizes = [], []
        for value in values:
            part = rows[y == value]
            head = self.leaf_of(part, label)
            children.append(self.c.product([head, self.learn(part, rest)]))
            sizes.append(len(part))
        return self.c.sum(children, np.array(sizes) / sum(sizes))

    def cluster(self, data: np.ndarray, scope: list[int]) -> np.ndarray:
        """(rows,) cluster of each row: k-means (k = ``row_clusters``) on standardised columns
        (one-hot for categorical variables)."""
        cols = []
        for j, v in enumerate(scope):
            x = data[:, j]
            if self.cards[v] > 2:
                cols.append(onehot(x, self.cards[v]).astype(float))  # (the states the slice holds)
            else:
                sd = x.std()
                cols.append(((x - x.mean()) / (sd if sd > 0 else 1.0))[:, None])
        km = KMeans(n_clusters=min(self.row_clusters, len(data)), n_init=2, max_iter=50,
                    random_state=int(self.rng.integers(2**31)))
        with warnings.catch_warnings(), threads_for(data.size):  # fewer distinct rows than clusters: fewer
            warnings.simplefilter("ignore", ConvergenceWarning)  # parts (``learn`` copes)
            return km.fit_predict(np.hstack(cols))


def learn_spn(schema: Schema, X: np.ndarray, min_instances_slice: int = 100, threshold: float = 0.3,
              leaf: str = "gaussian", seed: int = 0, progress=None, floors: np.ndarray | None = None,
              by_label: bool = False, min_leaf_rows: int = 1, leaf_model: str = "univariate",
              alpha: float = ALPHA, row_clusters: int = 2, latent_states: int = LATENT_STATES,
              deadline: float = math.inf) -> Circuit:
    """Learn a circuit over all of ``schema``'s variables from ``X`` (rows, variables); a
    continuous leaf's std is at least ``floors[variable]`` (default ``std_floors(X)``). No row
    split leaves a part with fewer than ``min_leaf_rows`` rows, and a leaf whose slice observes
    fewer takes its column's values, a tree's table row for a parent state fewer rows hold its
    marginal (``floor_cpts``), a histogram's edges a grid (``grid_edges``): every parameter is
    a statistic of that many rows (a client's privacy floor; given ``X`` has them). ``alpha``: the
    leaves' (and trees') pseudo-count per state or bin; ``row_clusters``: parts per row split;
    ``latent_states``: hidden states per variable of ``leaf_model="latent-tree"``; ``deadline``: a
    ``time.perf_counter()`` time past which no slice is split and every slice left ends in
    independent leaves (a selection's budget: ``fedpgm.circuits.selection``)."""
    if min_instances_slice < 1:
        raise FedpgmError(f"min_instances_slice must be >= 1, got {min_instances_slice}")
    if not 0.0 <= threshold <= 1.0:
        raise FedpgmError(f"threshold must lie in [0, 1] (an RDC value), got {threshold}")
    if leaf not in CONTINUOUS_LEAVES:
        raise FedpgmError(f"continuous leaf must be {' or '.join(map(repr, CONTINUOUS_LEAVES))}, got '{leaf}'")
    if not alpha > 0:
        raise FedpgmError(f"alpha (the leaves' pseudo-count) must be > 0, got {alpha}")
    if row_clusters < 2:
        raise FedpgmError(f"row_clusters (parts per row split) must be >= 2, got {row_clusters}")
    if latent_states < 1:
        raise FedpgmError(f"latent_states (hidden states per variable) must be >= 1, got {latent_states}")
    if leaf_model not in LEAF_MODELS:
        raise FedpgmError(f"leaf_model must be one of {LEAF_MODELS}, got '{leaf_model}'")
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[1] != len(schema) or len(X) == 0:
        raise FedpgmError(f"training data must be (rows > 0, {len(schema)}), got shape {X.shape}")
    empty = [f.name for j, f in enumerate(schema.features) if np.isnan(X[:, j]).all()]
    if empty:
        raise FedpgmError(f"column(s) {empty} have no observed values; drop them before learning")
    floors = std_floors(X) if floors is None else floors
    if min_leaf_rows < 1:
        raise FedpgmError(f"min_leaf_rows must be >= 1, got {min_leaf_rows}")
    builder = LearnSPNBuilder(schema, X, min_instances_slice, threshold, leaf, seed, floors, progress,
                              min_leaf_rows, leaf_model, alpha, row_clusters, latent_states, deadline)
    everything = np.arange(len(X))
    if by_label and schema.label is not None:
        builder.learn_by_label(everything, schema.index(schema.label))
    else:
        builder.learn(everything, list(range(len(schema))))
    builder.c.validate()
    return builder.c


def warm_up() -> None:
    """Pay a fresh process's one-time costs of LearnSPN before anything is timed: the first
    k-means and the first per-call thread limit each scan the loaded thread pools (about 9 and
    12 ms of CPU), more than a whole fit on a few hundred rows (a vertical breast cancer client:
    7 ms). Fits a small circuit that splits rows and variables once."""
    x = np.random.default_rng(0).normal(size=(64, 3))
    x[:32, :2] += 4.0
    learn_spn(Schema(tuple(Feature(f"x{j}", "continuous") for j in range(3))), x, min_instances_slice=16)

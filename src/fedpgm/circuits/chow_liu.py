"""Chow-Liu trees (Chow and Liu 1968) over discrete variables, compiled into circuit nodes.

The tree is the maximum spanning tree of the pairwise empirical mutual informations; rooted at
the first variable, each variable's CPT P(x_v | x_parent) is its pair's counts with a Laplace
pseudo-count ``alpha`` per cell. Its log-likelihood on the training rows is the best of any
tree-shaped Bayesian network (without smoothing: sum of -H(X_v) plus the tree's mutual
informations).

An edge is kept only where it pays for its parameters under BIC: ``n * I(X_u; X_v) > penalty *
log(n) / 2 * (r_u - 1)(r_v - 1)`` for n rows and r states; the maximum spanning tree of the kept
edges is then a *forest* (Chow-Liu forests; the maximum-BIC forest, as Edwards et al. 2010 select
it), each tree rooted at its first variable and the trees multiplied. On a slice of a few dozen
rows the weak pairs' counts are noise, and a full tree overfits them: on nltcs (LearnSPN, slice
minimum 127, threshold 0.05, pseudo-count 2) validation -5.990 with the full tree, -5.976 with
the forest. ``penalty=0`` keeps every edge with positive mutual information: the spanning tree.

ID-SPN (Rooshenas and Lowd 2014) and LearnSPN variants stop splitting early and model a slice's
variables by such a tree instead of a product of independent leaves
(``LearnSPN(leaf_model="chow-liu")``). Here the tree becomes ordinary circuit nodes, so it is
exact, tractable and answers the same queries (marginals, conditionals, MPE, sampling) and is
saved in the same file format, with no new leaf type: for each variable v and state x, a product
``I[X_v = x] * prod_{children c} S_{c|x}``, and for each state a of v's parent a sum
``S_{v|a} = sum_x P(x | a) * product_{v,x}``; a variable without children is one categorical
leaf per parent state. Indicators are categorical leaves with one-hot probabilities (a missing
value marginalises them to 1). Size: about (states + parent states) nodes per variable.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse.csgraph import breadth_first_order, connected_components, minimum_spanning_tree

from fedpgm.circuits.leaves import ALPHA, default_leaf, leaf_type
from fedpgm.circuits.structure import Circuit

BIC_PENALTY = 1.0  # weight of an edge's BIC penalty (0: a spanning tree)


def pair_counts(X: np.ndarray, cards: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(one-hot counts (S, S) over all variables' states, offsets (V+1,)): block (i, j) counts the
    rows where X_i and X_j take each pair of states (rows missing either are not counted)."""
    offsets = np.concatenate([[0], np.cumsum(cards)])
    Z = np.zeros((len(X), offsets[-1]), dtype=np.float64)
    for j in range(len(cards)):
        x = X[:, j]
        seen = ~np.isnan(x)
        Z[np.flatnonzero(seen), offsets[j] + x[seen].astype(int)] = 1.0
    return Z.T @ Z, offsets


def mutual_information(counts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """(V, V) empirical mutual information (nats) of every pair, from ``pair_counts``, each pair on
    the rows observing both: sum over state pairs of p(s, t) log(p(s, t) / (p(s) p(t))), for all
    pairs at once on the (S, S) counts (S = all variables' states)."""
    starts = offsets[:-1]
    var_of = np.repeat(np.arange(len(starts)), np.diff(offsets))  # (S,) the variable of each state
    per_var = np.add.reduceat(counts, starts, axis=1)  # (S, V): state s of i, rows with j observed
    totals = np.add.reduceat(per_var, starts, axis=0)  # (V, V): rows observing both
    n = totals[var_of][:, var_of]  # (S, S)
    row = per_var[:, var_of]  # count of s where t's variable is observed
    col = np.add.reduceat(counts, starts, axis=0)[var_of, :]  # count of t where s's variable is observed
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(counts > 0, counts / n * np.log(counts * n / (row * col)), 0.0)
    mi = np.add.reduceat(np.add.reduceat(terms, starts, axis=0), starts, axis=1)
    np.fill_diagonal(mi, 0.0)
    return np.maximum(mi, 0.0)


def chow_liu(X: np.ndarray, cards: list[int], alpha: float = ALPHA,
             penalty: float = BIC_PENALTY) -> tuple[np.ndarray, list[np.ndarray]]:
    """(parent of each variable (V,), -1 at each tree's root (its first variable); CPTs:
    ``cpts[v]`` is (parent states, states of v), for a root (1, states)) of the Chow-Liu forest of
    X (rows, V) with discrete codes 0..cards[v]-1 (NaN = missing): edges whose mutual information
    does not pay ``penalty`` times their BIC penalty are left out (module doc)."""
    counts, offsets = pair_counts(X, cards)
    V = len(cards)
    parent = np.full(V, -1)
    if V > 1:
        mi = mutual_information(counts, offsets)
        free = np.outer(np.asarray(cards) - 1, np.asarray(cards) - 1)  # (V, V) an edge's free parameters
        keep = (mi > 0) & (len(X) * mi > penalty * 0.5 * np.log(max(len(X), 1)) * free)
        # a minimum spanning tree of these weights is a maximum one of MI (all kept > 0; 0 = no edge)
        weight = np.where(keep, mi.max() + 1.0 - mi, 0.0)
        np.fill_diagonal(weight, 0.0)
        forest = minimum_spanning_tree(weight)
        _, component = connected_components(forest, directed=False)
        for first in np.unique(component, return_index=True)[1]:
            order, predecessors = breadth_first_order(forest, int(first), directed=False)
            parent[order[1:]] = predecessors[order[1:]]
    cpts = []
    for v in range(V):
        block = slice(offsets[v], offsets[v + 1])
        if parent[v] < 0:
            n = np.diag(counts)[block][None, :]  # (1, states): the root's own counts
        else:
            n = counts[offsets[parent[v]]:offsets[parent[v] + 1], block]  # (parent states, states)
        cpts.append((n + alpha) / (n + alpha).sum(axis=1, keepdims=True))
    return parent, cpts


def add_tree(c: Circuit, variables: list[int], parent: np.ndarray, cpts: list[np.ndarray]) -> list[int]:
    """Add the forest over ``variables`` (``parent``/``cpts`` index into this list, as ``chow_liu``
    returns them) to ``c`` as sums, products and leaves; returns each tree's root node id (their
    product is the forest's distribution)."""
    schema = c.schema
    children: list[list[int]] = [[] for _ in variables]
    for v, p in enumerate(parent):
        if p >= 0:
            children[int(p)].append(v)
    given: dict[int, list[int]] = {}  # v -> node id of S_{v|a} for each state a of v's parent

    def indicator(v: int, x: int) -> int:
        var = variables[v]
        probs = np.zeros(schema.features[var].cardinality)
        probs[x] = 1.0
        return c.leaf(var, "categorical", {"probs": probs})

    for v in reversed(breadth_first(parent)):  # children before parents
        var, table = variables[v], cpts[v]
        if not children[v]:  # one leaf per parent state: P(X_v | a)
            dist = default_leaf(schema.features[var].kind)
            given[v] = [c.leaf(var, dist, leaf_type(dist).from_probabilities(row)) for row in table]
            continue
        products = [c.product([indicator(v, x)] + [given[ch][x] for ch in children[v]])
                    for x in range(table.shape[1])]
        given[v] = [c.sum(products, row) for row in table]
    return [given[int(r)][0] for r in np.flatnonzero(parent < 0)]


def breadth_first(parent: np.ndarray) -> list[int]:
    """The forest's variables, every parent before its children."""
    order = [int(r) for r in np.flatnonzero(parent < 0)]
    for v in order:
        order += [int(u) for u in np.flatnonzero(parent == v)]
    return order

"""Latent Chow-Liu trees (hidden Chow-Liu trees, HCLT; Liu and Van den Broeck 2021) as circuit nodes.

The Chow-Liu tree of the observed variables (``fedpgm.circuits.chow_liu``, every edge kept) with a
hidden variable Z_v of ``states`` values at each node: the hidden variables form the tree and
each X_v depends on its own Z_v only,

    p(x) = sum_z p(z_root) prod_{v not root} p(z_v | z_parent(v)) prod_v p(x_v | z_v).

With one hidden state per observed state and one-hot emissions this is the Chow-Liu tree itself;
with more states a row's variables depend on each other beyond the tree's pairs. As circuit
nodes, so it is exact, answers the same queries and is saved in the same file format as any
circuit: for each variable v and hidden state z a leaf p(x_v | z) and a product of that leaf
with v's children's sums for z; for each state a of v's parent's hidden variable a sum
``S_{v|a} = sum_z p(z | a) product_{v,z}``; the root is one sum over its products. Size per
variable: ``states`` leaves, products and sums; ``states ** 2`` sum edges per tree edge.

The parameters start at the Chow-Liu tree: hidden state z of v stands for observed state
``z mod r_v`` (r_v: v's states), its emission puts ``1 - EMISSION_NOISE`` on that state, and
the transitions are the tree's conditional tables for the observed states the hidden ones stand
for (a state's probability shared by its hidden copies), each weight times a log-normal jitter
(``JITTER``) so that copies of one state can drift apart. EM (``fedpgm.circuits.em``, stepwise
over mini-batches) trains them from there; without EM a latent tree is a slightly blurred
Chow-Liu tree.
"""

from __future__ import annotations

import numpy as np

from fedpgm.circuits.chow_liu import breadth_first
from fedpgm.circuits.leaves import default_leaf, leaf_type
from fedpgm.circuits.structure import Circuit

LATENT_STATES = 12  # hidden states per variable (as the HCLT results in ../shared/notes/circuits.md)
EMISSION_NOISE = 0.05  # the start's emission mass off the state a hidden state stands for
JITTER = 0.3  # standard deviation of the start's log-normal jitter on each transition weight


def add_latent_tree(c: Circuit, variables: list[int], parent: np.ndarray, cpts: list[np.ndarray], states: int,
                    rng: np.random.Generator) -> list[int]:
    """Add the latent tree over ``variables`` (``parent``/``cpts``: the Chow-Liu forest as
    ``chow_liu`` returns it, indices into this list) to ``c``; returns each tree's root node id
    (their product is the distribution)."""
    schema = c.schema
    cards = [schema.features[var].cardinality for var in variables]
    children: list[list[int]] = [[] for _ in variables]
    for v, p in enumerate(parent):
        if p >= 0:
            children[int(p)].append(v)
    given: dict[int, list[int]] = {}  # v -> node ids of S_{v|a}, one per hidden state a of v's parent
    for v in reversed(breadth_first(parent)):  # children before parents
        var, r = variables[v], cards[v]
        dist = default_leaf(schema.features[var].kind)
        products = []
        for z in range(states):
            emission = np.full(r, EMISSION_NOISE / max(r - 1, 1))  # (a one-state variable: that state)
            emission[z % r] = 1.0 - EMISSION_NOISE if r > 1 else 1.0
            leaf = c.leaf(var, dist, leaf_type(dist).from_probabilities(emission))
            below = [given[ch][z] for ch in children[v]]
            products.append(c.product([leaf] + below) if below else leaf)
        observed = np.arange(states) % r  # the observed state each hidden state stands for
        if parent[v] < 0:
            rows = cpts[v][[0]]  # (1, r): the root's marginal
        else:
            rows = cpts[v][np.arange(states) % cards[int(parent[v])]]  # (states, r): per parent hidden state
        copies = np.bincount(observed, minlength=r)[observed]  # hidden states sharing an observed one's mass
        weights = rows[:, observed] / copies * np.exp(JITTER * rng.standard_normal((len(rows), states)))
        given[v] = [c.sum(products, w / w.sum()) for w in weights]
    return [given[int(r)][0] for r in np.flatnonzero(parent < 0)]


def floor_cpts(X: np.ndarray, cards: list[int], parent: np.ndarray, cpts: list[np.ndarray], alpha: float,
               min_rows: int) -> list[np.ndarray]:
    """``cpts`` of the forest ``chow_liu`` learned on X (rows, V) with every table row resting on
    ``min_rows`` rows (a client's privacy floor): the row of a parent state that fewer rows hold
    (of those observing both), or a root's table observed on fewer, becomes the variable's marginal
    over X (pseudo-count ``alpha``), or uniform where fewer rows than that observe it."""
    out = []
    for v, table in enumerate(cpts):
        x = X[:, v]
        seen = ~np.isnan(x)
        counts = np.bincount(x[seen].astype(int), minlength=cards[v])[:cards[v]] + alpha
        marginal = counts / counts.sum() if seen.sum() >= min_rows else np.full(cards[v], 1.0 / cards[v])
        if parent[v] < 0:
            held = np.array([seen.sum()])
        else:
            p = X[:, int(parent[v])]
            held = np.bincount(p[seen & ~np.isnan(p)].astype(int), minlength=len(table))[:len(table)]
        out.append(np.where((held < min_rows)[:, None], marginal, table))
    return out

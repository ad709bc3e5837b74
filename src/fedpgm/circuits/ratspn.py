"""RAT-SPN (Peharz et al. 2020), node form: a random region graph made into a circuit, trained by EM.

There is one RAT-SPN: its region graph is ``region_graph.binary_trees`` (for each of
``repetitions`` random variable orders, the variables are split in halves recursively ``depth``
times, fewer where a region has a single variable), and a region graph becomes a circuit in
either representation of ``fedpgm.circuits.protocol``: here, ``region_circuit`` gives the node
circuit of any region graph, which mixes leaf types per column (tabular data) and joins FedPC's
gluing (the learner ``ratspn``); ``DenseCircuit`` gives the tensorized one, for data of one kind
such as images (the learner ``pd`` with ``structure="binary-trees"``). A leaf region holds
``n_inputs`` factorised input distributions (products of one leaf per variable, initialised
from random subsets of the rows); a split of a region into two gives all pairwise products of
the two halves' nodes; an inner region mixes those products with ``n_sums`` sum nodes; the
root mixes the top products of every repetition. Parameters are then fitted by EM
(``fedpgm.circuits.em``), batch or mini-batch. With a floor of ``min_rows`` rows (a FedPC
client's privacy policy) an input is fitted to at least that many distinct rows (all of them if
fewer), a leaf on fewer observed values to its column's, and EM keeps the floor.
"""

from __future__ import annotations

import numpy as np

from fedpgm.circuits.leaves import default_leaf, leaf_type

from fedpgm.circuits.weighted import floored_values, std_floors
from fedpgm.circuits.region_graph import RegionGraph, binary_trees
from fedpgm.circuits.structure import Circuit
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError


def init_input(c: Circuit, X: np.ndarray, vars_: list[int], leaf: str, rng, floors: np.ndarray,
               min_rows: int = 1) -> int:
    """A product of leaves over ``vars_``, fitted to a random fifth of the rows (at least
    ``min_rows`` of them, each once; a leaf on fewer observed values: ``floored_values``)."""
    size = max(2, len(X) // 5)
    if min_rows <= 1:
        rows = rng.choice(len(X), size=size, replace=len(X) < 10)
    else:
        size = max(size, min_rows)
        rows = rng.choice(len(X), size=size, replace=False) if size < len(X) else np.arange(len(X))
    leaves = []
    for v in vars_:
        feat = c.schema.features[v]
        dist = default_leaf(feat.kind, leaf)
        x = X[rows, v]
        x = x[~np.isnan(x)]
        w = np.ones(len(x))
        if min_rows > 1:
            x, w = floored_values(x, w, X[~np.isnan(X[:, v]), v], min_rows)
        leaves.append(c.leaf(v, dist, leaf_type(dist).fit(x, w, feat.cardinality, floors[v], min_rows=min_rows)))
    return leaves[0] if len(leaves) == 1 else c.product(leaves)


def region(c: Circuit, X: np.ndarray, graph: RegionGraph, children: dict, r: int, n_sums: int, n_inputs: int,
           leaf: str, rng, floors: np.ndarray, min_rows: int = 1) -> list[int]:
    """Node ids representing region ``r``: ``n_inputs`` input products at a leaf region, else the
    pairwise products of each partition's two halves, mixed by ``n_sums`` sums (the root's
    products are returned unmixed: one sum over every repetition's products mixes them)."""
    if r not in children:
        return [init_input(c, X, list(graph.regions[r]), leaf, rng, floors, min_rows) for _ in range(n_inputs)]
    products = []
    for a, b in children[r]:
        left = region(c, X, graph, children, a, n_sums, n_inputs, leaf, rng, floors, min_rows)
        right = region(c, X, graph, children, b, n_sums, n_inputs, leaf, rng, floors, min_rows)
        products += [c.product([u, v]) for u in left for v in right]
    if r == graph.root:
        return products
    return [c.sum(products, rng.dirichlet(np.ones(len(products)))) for _ in range(n_sums)]


def region_circuit(schema: Schema, X: np.ndarray, graph: RegionGraph, n_sums: int = 4, n_inputs: int = 4,
                   leaf: str = "gaussian", seed: int = 0, floors: np.ndarray | None = None,
                   min_rows: int = 1) -> Circuit:
    """The node circuit of region graph ``graph`` over ``schema``'s variables, with initial
    parameters (train it with ``em``); a continuous leaf's std is at least ``floors[variable]``
    (default ``std_floors(X)``); ``min_rows``: the inputs' floor (module doc)."""
    for name, value in (("n_sums", n_sums), ("n_inputs", n_inputs)):
        if value < 1:
            raise FedpgmError(f"{name} must be >= 1, got {value}")
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[1] != len(schema) or len(X) == 0:
        raise FedpgmError(f"training data must be (rows > 0, {len(schema)}), got shape {X.shape}")
    if graph.n_vars != len(schema):
        raise FedpgmError(f"the region graph covers {graph.n_vars} variables; the schema has {len(schema)}")
    children: dict[int, list[tuple[int, int]]] = {}
    for parent, a, b in graph.partitions:
        children.setdefault(parent, []).append((a, b))
    rng = np.random.default_rng(seed)
    c = Circuit(schema)
    floors = std_floors(X) if floors is None else floors
    tops = region(c, X, graph, children, graph.root, n_sums, n_inputs, leaf, rng, floors, min_rows)
    if len(tops) > 1:
        c.sum(tops, rng.dirichlet(np.ones(len(tops))))
    c.validate()
    return c


def rat_spn(schema: Schema, X: np.ndarray, depth: int = 2, repetitions: int = 4, n_sums: int = 4,
            n_inputs: int = 4, leaf: str = "gaussian", seed: int = 0, floors: np.ndarray | None = None,
            min_rows: int = 1) -> Circuit:
    """The RAT-SPN structure with initial parameters: ``region_circuit`` of ``binary_trees``."""
    for name, value in (("depth", depth), ("repetitions", repetitions)):
        if value < 1:
            raise FedpgmError(f"{name} must be >= 1, got {value}")
    graph = binary_trees(len(schema), depth, repetitions, seed)
    return region_circuit(schema, X, graph, n_sums, n_inputs, leaf, seed, floors, min_rows)

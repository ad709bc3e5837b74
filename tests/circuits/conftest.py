"""Random small circuits for brute-force checks."""

import itertools

import numpy as np
import pytest

from fedpgm.circuits.structure import Circuit
from fedpgm.data.schema import Feature, Schema


def random_leaf(c: Circuit, var: int, rng, deterministic_value=None) -> int:
    f = c.schema.features[var]
    if f.kind == "continuous":
        return c.leaf(var, "gaussian", {"mean": rng.normal(), "std": rng.uniform(0.5, 1.5)})
    if deterministic_value is not None:
        probs = np.full(f.cardinality, 1e-3)
        probs[deterministic_value] = 1.0
        return c.leaf(var, "categorical", {"probs": probs / probs.sum()})
    if f.kind == "binary" and rng.random() < 0.5:
        return c.leaf(var, "bernoulli", {"p": rng.uniform(0.1, 0.9)})
    return c.leaf(var, "categorical", {"probs": rng.dirichlet(np.ones(f.cardinality))})


def build(c: Circuit, scope: list[int], rng, depth: int) -> int:
    if len(scope) == 1:
        return random_leaf(c, scope[0], rng)
    if depth == 0:
        return c.product([random_leaf(c, v, rng) for v in scope])
    k = int(rng.integers(2, 4))
    children = []
    for _ in range(k):
        perm = list(rng.permutation(scope))
        cut = int(rng.integers(1, len(perm)))
        children.append(c.product([build(c, sorted(perm[:cut]), rng, depth - 1),
                                   build(c, sorted(perm[cut:]), rng, depth - 1)]))
    return c.sum(children, rng.dirichlet(np.ones(k)))


def random_circuit(schema: Schema, seed: int, depth: int = 3) -> Circuit:
    rng = np.random.default_rng(seed)
    c = Circuit(schema)
    build(c, list(range(len(schema))), rng, depth)
    c.validate()
    return c


def discrete_schema(cards=(2, 3, 2, 4)) -> Schema:
    feats = []
    for i, k in enumerate(cards):
        cats = tuple(str(j) for j in range(k))
        feats.append(Feature(f"v{i}", "binary" if k == 2 else "categorical", cats))
    return Schema(tuple(feats))


def all_assignments(schema: Schema) -> np.ndarray:
    return np.array(list(itertools.product(*[range(f.cardinality) for f in schema.features])), dtype=float)


@pytest.fixture
def schema4():
    return discrete_schema()

"""The fused pass's plan (``fedpgm.circuits.fused``): which nodes flatten into mixtures of linear
terms, and that the fused root equals the plain layers in every case."""

import math

import numpy as np
import pytest
import torch

from fedpgm.circuits import Circuit, CompiledCircuit, fused
from fedpgm.data.schema import Feature, Schema

from conftest import random_circuit

SCHEMA = Schema(tuple(Feature(f"c{v}", "continuous") for v in range(3)) + (Feature("b", "binary", ("0", "1")),))


def gauss(c: Circuit, var: int, mean: float, std: float = 1.0) -> int:
    return c.leaf(var, "gaussian", {"mean": mean, "std": std})


def mixture(c: Circuit, var: int, means, weights) -> int:
    return c.sum([gauss(c, var, m, 0.5 + 0.1 * k) for k, m in enumerate(means)], weights)


def agrees(c: Circuit) -> CompiledCircuit:
    """Compile ``c`` and check its fused root against the plain layers (sum and max, rows with
    and without NaN, rows far in a tail where most terms lie hundreds of nats below the best)."""
    c.validate()
    cc = CompiledCircuit(c)
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.normal(size=(400, 3)) * 4, rng.integers(0, 2, 400)]).astype(float)
    x[:40, 0] = 60.0
    partial = x.copy()
    partial[rng.random(x.shape) < 0.25] = np.nan
    for rows in (x, partial):
        for mode in ("sum", "max"):
            t = cc.tensor(rows)
            torch.testing.assert_close(cc.fused_root(t, mode), cc.forward(t, mode)[cc.root], rtol=1e-10, atol=1e-10)
    return cc


def test_a_learnspn_tree_flattens_into_one_mixture_at_the_root():
    """sum(prod(sum(a, b), leaf, leaf), prod(leaves)): the inner sum's two terms take the leaves
    beside them, the root's third term is the other product; no layer is left."""
    c = Circuit(SCHEMA)
    inner = c.sum([c.product([gauss(c, 0, -1), gauss(c, 1, 0)]), c.product([gauss(c, 0, 2), gauss(c, 1, 1)])],
                  [0.3, 0.7])
    left = c.product([inner, gauss(c, 2, 0.5), c.leaf(3, "bernoulli", {"p": 0.2})])
    right = c.product([gauss(c, 0, 5), gauss(c, 1, -3), gauss(c, 2, 1), c.leaf(3, "bernoulli", {"p": 0.9})])
    root = c.sum([left, right], [0.4, 0.6])
    plan = agrees(c).fusion()
    assert plan.linear.frontier == [root] and plan.layers == []
    # three terms padded to four: (first term row, value row, mixtures, arity)
    assert plan.linear.buckets == [(0, 4, 1, 4)] and plan.n_values == 5
    _, _, _, log_w = plan.linear.coef["sum"]
    np.testing.assert_allclose(sorted(log_w[:3, 0].tolist()), sorted(np.log([0.4 * 0.3, 0.4 * 0.7, 0.6])))
    assert log_w[3, 0] == -math.inf


def test_a_product_of_two_mixtures_stays_a_layer_over_both():
    c = Circuit(SCHEMA)
    a, b = mixture(c, 0, [-2, 0, 3], [0.2, 0.5, 0.3]), mixture(c, 1, [1, 4], [0.5, 0.5])
    prod = c.product([a, b, gauss(c, 2, 0), c.leaf(3, "bernoulli", {"p": 0.5})])
    plan = agrees(c).fusion()
    assert prod not in plan.linear.fused and {a, b} <= set(plan.linear.frontier)
    assert [layer.kind for layer in plan.layers] == ["product"]


def test_a_shared_mixture_is_computed_once_not_copied_into_its_parents():
    """A DAG (as a Chow-Liu leaf compiles): one mixture used by two products."""
    c = Circuit(SCHEMA)
    shared = mixture(c, 0, [-1, 1, 3], [0.3, 0.3, 0.4])
    rest = [c.product([shared, gauss(c, 1, m), gauss(c, 2, 0), c.leaf(3, "bernoulli", {"p": p})])
            for m, p in ((0, 0.1), (2, 0.8))]
    c.sum(rest, [0.5, 0.5])
    plan = agrees(c).fusion()
    assert shared in plan.linear.frontier and not set(rest) & plan.linear.fused


def test_a_sum_over_max_terms_stays_a_layer(monkeypatch):
    monkeypatch.setattr(fused, "MAX_TERMS", 2)
    c = Circuit(SCHEMA)
    kids = [c.product([gauss(c, 0, m), gauss(c, 1, -m), gauss(c, 2, 0), c.leaf(3, "bernoulli", {"p": 0.3})])
            for m in (-2, 0, 2)]
    root = c.sum(kids, [0.2, 0.0, 0.8])  # the zero weight gives no term: 2 terms, flattened
    assert agrees(c).fusion().linear.frontier == [root]
    c.sum([root, c.sum(kids, [0.3, 0.3, 0.4])], [0.5, 0.5])  # 2 + 3 terms: over the limit
    plan = agrees(c).fusion()
    assert plan.linear.frontier[-1] != c.root and [layer.kind for layer in plan.layers] == ["sum", "sum"]


@pytest.mark.parametrize("n_kids", [1, 2, 3, 5, 9])
def test_the_matmul_has_a_multiple_of_gemm_rows_and_pads_change_nothing(n_kids):
    c = Circuit(SCHEMA)
    kids = [c.product([gauss(c, 0, k), gauss(c, 1, 0), gauss(c, 2, -k), c.leaf(3, "bernoulli", {"p": 0.4})])
            for k in range(n_kids)]
    c.sum(kids, np.full(n_kids, 1 / n_kids))
    plan = agrees(c).fusion()
    assert plan.linear.n_terms % fused.GEMM_ROWS == 0


def test_sums_over_shared_products_stay_a_layer_over_them():
    """A RAT-SPN region: two sums over the same products. Absorbing them would copy each
    product's row into both sums' terms; instead the products are the frontier, once each."""
    c = Circuit(SCHEMA)
    prods = [c.product([gauss(c, 0, m), gauss(c, 1, -m), gauss(c, 2, 0), c.leaf(3, "bernoulli", {"p": 0.5})])
             for m in (-1, 0, 2)]
    sums = [c.sum(prods, w) for w in ([0.2, 0.3, 0.5], [0.6, 0.3, 0.1])]
    c.sum(sums, [0.5, 0.5])
    plan = agrees(c).fusion()
    assert sorted(plan.linear.frontier) == prods and not set(sums) & plan.linear.fused
    assert plan.linear.n_terms == 4  # three products, padded to a multiple of GEMM_ROWS


@pytest.mark.parametrize("seed", range(6))
def test_fused_linear_evaluation_equals_the_plain_layers(seed):
    from fedpgm.circuits.leaves import Histogram

    feats = [Feature("c0", "continuous"), Feature("c1", "continuous"),
             Feature("b", "binary", ("0", "1")), Feature("k", "categorical", ("a", "b", "c"))]
    s = Schema(tuple(feats))
    c = random_circuit(s, seed)
    rng = np.random.default_rng(seed)
    if seed % 2:  # a non-linear (histogram) leaf inside the circuit
        top = c.root
        x = rng.normal(size=300)
        h = c.leaf(0, "histogram", Histogram.fit(x, np.ones_like(x), 0))
        rest = c.product([c.leaf(1, "gaussian", {"mean": 0.3, "std": 2.0}),
                          c.leaf(2, "bernoulli", {"p": 0.2}),
                          c.leaf(3, "categorical", {"probs": [0.0, 0.5, 0.5]})])
        c.sum([top, c.product([h, rest])], [0.6, 0.4])
    cc = CompiledCircuit(c)
    X = np.column_stack([rng.normal(size=200) * 3, rng.normal(size=200), rng.integers(0, 2, 200),
                         rng.integers(0, 3, 200)]).astype(float)
    X[rng.random(X.shape) < 0.2] = np.nan
    complete = np.where(np.isnan(X), 0.0, X)  # complete rows take the constant-per-node path
    for x in (cc.tensor(X), cc.tensor(complete)):
        for mode in ("sum", "max"):
            plain = cc.forward(x, mode)[cc.root]
            fused = cc.fused_root(x, mode)
            torch.testing.assert_close(fused, plain, rtol=1e-9, atol=1e-9)

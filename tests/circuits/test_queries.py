"""Every query against brute-force enumeration on small random circuits."""

import numpy as np
import pytest
import torch
from conftest import all_assignments, build, discrete_schema, random_circuit
from scipy import integrate

from fedpgm.circuits import Circuit, CompiledCircuit
from fedpgm.circuits import queries as Q
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError

SEEDS = range(6)


@pytest.mark.parametrize("seed", SEEDS)
def test_distribution_sums_to_one(seed):
    s = discrete_schema()
    cc = CompiledCircuit(random_circuit(s, seed))
    assert np.exp(Q.log_likelihood(cc, all_assignments(s))).sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_marginals_and_conditionals_match_enumeration(seed):
    s = discrete_schema()
    cc = CompiledCircuit(random_circuit(s, seed))
    X = all_assignments(s)
    p = np.exp(Q.log_likelihood(cc, X))
    rng = np.random.default_rng(seed)
    for _ in range(5):
        hidden = rng.random(4) < 0.5
        row = X[rng.integers(len(X))].copy()
        match = (X[:, ~hidden] == row[~hidden]).all(axis=1)
        row[hidden] = np.nan
        assert np.exp(Q.log_likelihood(cc, row[None]))[0] == pytest.approx(p[match].sum(), rel=1e-10)
    # p(v0 = a | v2 = b) by enumeration
    for a in range(2):
        for b in range(2):
            x = np.array([[a, np.nan, b, np.nan]])
            brute = p[(X[:, 0] == a) & (X[:, 2] == b)].sum() / p[X[:, 2] == b].sum()
            assert np.exp(Q.conditional(cc, x, ["v0"]))[0] == pytest.approx(brute, rel=1e-10)
    # predict_proba of v3 given v0, v1
    x = np.array([[1, 2, np.nan, np.nan]])
    brute = np.array([p[(X[:, 0] == 1) & (X[:, 1] == 2) & (X[:, 3] == k)].sum() for k in range(4)])
    np.testing.assert_allclose(Q.predict_proba(cc, x, "v3")[0], brute / brute.sum(), rtol=1e-10)


def deterministic_circuit(schema, seed):
    """A selective sum: each child puts all of v3's mass on a different value."""
    rng = np.random.default_rng(seed)
    c = Circuit(schema)
    children = []
    for value in range(schema.features[3].cardinality):
        gate = c.leaf(3, "categorical", {"probs": np.eye(4)[value]})
        rest = build(c, [0, 1, 2], rng, 0)  # a product of leaves
        children.append(c.product([gate, rest]))
    c.sum(children, rng.dirichlet(np.ones(len(children))))
    return c


@pytest.mark.parametrize("seed", SEEDS)
def test_mpe_matches_enumeration_on_deterministic_circuits(seed):
    s = discrete_schema()
    cc = CompiledCircuit(deterministic_circuit(s, seed))
    X = all_assignments(s)
    p = np.exp(Q.log_likelihood(cc, X))
    np.testing.assert_array_equal(Q.mpe(cc, np.full((1, 4), np.nan))[0], X[p.argmax()])
    ev = np.array([[np.nan, 1, np.nan, np.nan]])
    sub = X[:, 1] == 1
    np.testing.assert_array_equal(Q.mpe(cc, ev)[0], X[sub][p[sub].argmax()])


@pytest.mark.parametrize("seed", SEEDS)
def test_mpe_on_any_circuit_keeps_evidence_and_is_a_lower_bound(seed):
    s = discrete_schema()
    cc = CompiledCircuit(random_circuit(s, seed))
    X = all_assignments(s)
    ll = Q.log_likelihood(cc, X)
    ev = np.array([[np.nan, np.nan, 1, np.nan]])
    out = Q.mpe(cc, ev)[0]
    assert out[2] == 1 and not np.isnan(out).any()
    best = ll[X[:, 2] == 1].max()
    assert Q.log_likelihood(cc, out[None])[0] <= best + 1e-12
    assert Q.log_likelihood(cc, out[None])[0] >= cc.forward(cc.tensor(ev), "max")[cc.root, 0].item() - 1e-9


def test_sample_frequencies_match_probabilities():
    s = discrete_schema()
    cc = CompiledCircuit(random_circuit(s, 3))
    X = all_assignments(s)
    p = np.exp(Q.log_likelihood(cc, X))
    n = 60_000
    draws = Q.sample(cc, n, seed=0)
    codes = np.ravel_multi_index(draws.T.astype(int), [2, 3, 2, 4])
    freq = np.bincount(codes, minlength=len(X)) / n
    # every cell within 5 binomial standard deviations (stated tolerance)
    assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-4)


def test_conditional_sampling_matches_the_conditional():
    s = discrete_schema()
    cc = CompiledCircuit(random_circuit(s, 4))
    X = all_assignments(s)
    p = np.exp(Q.log_likelihood(cc, X))
    n = 40_000
    ev = np.tile([np.nan, 2, np.nan, np.nan], (n, 1))
    draws = Q.sample(cc, evidence=ev, seed=1)
    assert (draws[:, 1] == 2).all()
    sub = X[:, 1] == 2
    cond = p[sub] / p[sub].sum()
    codes = np.ravel_multi_index(draws.T.astype(int), [2, 3, 2, 4])
    freq = np.bincount(codes, minlength=len(X))[np.flatnonzero(sub)] / n
    assert np.all(np.abs(freq - cond) <= 5 * np.sqrt(cond * (1 - cond) / n) + 1e-4)


def gaussian_schema(d):
    return Schema(tuple(Feature(f"x{i}", "continuous") for i in range(d)))


@pytest.mark.parametrize("d", [1, 2])
def test_gaussian_circuits_integrate_to_one(d):
    cc = CompiledCircuit(random_circuit(gaussian_schema(d), 7, depth=2))

    def density(*xs):
        return float(np.exp(Q.log_likelihood(cc, np.array([xs]))[0]))

    if d == 1:
        total, _ = integrate.quad(density, -15, 15, limit=200)
    else:
        grid = np.linspace(-12, 12, 801)
        xx, yy = np.meshgrid(grid, grid)
        dens = np.exp(Q.log_likelihood(cc, np.column_stack([xx.ravel(), yy.ravel()])))
        total = dens.sum() * (grid[1] - grid[0]) ** 2
    assert total == pytest.approx(1.0, abs=1e-4)


def test_histogram_leaf_integrates_to_one_and_has_tails():
    from fedpgm.circuits.leaves import Histogram

    rng = np.random.default_rng(0)
    x = rng.gamma(2.0, size=400)
    s = gaussian_schema(1)
    c = Circuit(s)
    leaf = Histogram.fit(x, np.ones_like(x), 0)
    c.leaf(0, "histogram", leaf)
    cc = CompiledCircuit(c)
    total, _ = integrate.quad(lambda v: float(np.exp(Q.log_likelihood(cc, np.array([[v]]))[0])),
                              -20, 40, limit=400, points=leaf["edges"])
    assert total == pytest.approx(1.0, abs=1e-3)
    assert np.isfinite(Q.log_likelihood(cc, np.array([[x.max() + 5]])))[0]
    draws = Q.sample(cc, 20000, seed=0)[:, 0]
    assert abs(draws.mean() - x.mean()) < 0.1


def test_bad_queries():
    s = discrete_schema()
    cc = CompiledCircuit(random_circuit(s, 0))
    with pytest.raises(FedpgmError, match="outside its support 0..2"):
        Q.log_likelihood(cc, np.array([[0, 5, 0, 0]]))
    with pytest.raises(FedpgmError, match="4 columns"):
        Q.log_likelihood(cc, np.zeros((1, 3)))
    with pytest.raises(FedpgmError, match="unknown column"):
        Q.conditional(cc, np.zeros((1, 4)), ["nope"])
    with pytest.raises(FedpgmError, match="need values in every row"):
        Q.conditional(cc, np.array([[np.nan, 0, 0, 0]]), ["v0"])


def test_sum_layers_of_mixed_arity_and_zero_weights_match_a_direct_mixture():
    """One layer of sums with 1, 2 and 5 children (padded to 5) and a zero weight, float32 and
    float64: every sum equals log sum_k w_k N(x; mu_k, sd_k), computed here with scipy."""
    from scipy.special import logsumexp
    from scipy.stats import norm

    s = Schema((Feature("x", "continuous"),))
    rng = np.random.default_rng(0)
    c = Circuit(s)
    specs = [(1,), (0.3, 0.7), (0.1, 0.0, 0.4, 0.2, 0.3)]
    mixtures = []
    for weights in specs:
        mus, sds = rng.normal(size=len(weights)) * 3, rng.uniform(0.2, 2.0, len(weights))
        kids = [c.leaf(0, "gaussian", {"mean": m, "std": d}) for m, d in zip(mus, sds)]
        mixtures.append((c.sum(kids, weights), np.array(weights), mus, sds))
    c.sum([m[0] for m in mixtures], [0.2, 0.3, 0.5])
    x = np.array([[-40.0], [-1.0], [0.0], [2.5], [np.nan]])
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-4)):
        cc = CompiledCircuit(c, dtype=dtype)
        values = cc.forward(cc.tensor(x))
        for node, weights, mus, sds in mixtures:
            with np.errstate(divide="ignore"):
                expected = logsumexp(np.log(weights) + norm.logpdf(x, mus, sds), axis=1)
            expected[np.isnan(x[:, 0])] = 0.0  # marginalised
            np.testing.assert_allclose(values[cc.position[node]].double().numpy(), expected, rtol=tol, atol=tol)

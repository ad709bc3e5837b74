"""Chow-Liu trees compiled into circuits: the right tree, the exact distribution, every query."""

import itertools

import numpy as np
import pandas as pd
import pytest

from fedpgm.circuits.chow_liu import add_tree, chow_liu, mutual_information, pair_counts
from fedpgm.circuits.compiled import CompiledCircuit
from fedpgm.circuits.estimator import LearnSPN
from fedpgm.circuits.queries import log_likelihood
from fedpgm.circuits.structure import Circuit
from fedpgm.data.schema import Feature, Schema

CARDS = [2, 3, 2, 2, 2]
TRUE_PARENT = [-1, 0, 1, 1, 0]  # 0 -> 1 -> {2, 3}, 0 -> 4
SCHEMA = Schema(tuple(Feature(f"x{i}", "binary" if k == 2 else "categorical", tuple(str(s) for s in range(k)))
                      for i, k in enumerate(CARDS)))


def sample_tree(n: int, seed: int = 0) -> np.ndarray:
    """Rows from a tree-shaped Bayesian network with strong dependencies along TRUE_PARENT."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n, len(CARDS)))
    for v, p in enumerate(TRUE_PARENT):
        if p < 0:
            X[:, v] = rng.integers(0, CARDS[v], n)
            continue
        follow = rng.random(n) < 0.8  # copy (a function of) the parent's state, else uniform
        X[:, v] = np.where(follow, X[:, p].astype(int) % CARDS[v], rng.integers(0, CARDS[v], n))
    return X


def brute_force_log_prob(x, parent, cpts) -> float:
    return float(sum(np.log(cpts[v][0 if p < 0 else int(x[p]), int(x[v])]) for v, p in enumerate(parent)))


def tree_circuit(parent, cpts) -> CompiledCircuit:
    c = Circuit(SCHEMA)
    add_tree(c, list(range(len(CARDS))), parent, cpts)
    c.validate()
    return CompiledCircuit(c)


def test_the_learned_tree_is_the_generating_tree():
    parent, cpts = chow_liu(sample_tree(20_000), CARDS)
    edges = {frozenset((v, int(p))) for v, p in enumerate(parent) if p >= 0}
    assert edges == {frozenset((v, p)) for v, p in enumerate(TRUE_PARENT) if p >= 0}
    assert [t.shape for t in cpts][:2] == [(1, 2), (2, 3)] and all(np.allclose(t.sum(axis=1), 1) for t in cpts)


def test_the_circuit_is_the_tree_bn_by_enumeration_and_marginalises_exactly():
    parent, cpts = chow_liu(sample_tree(500, seed=1), CARDS)
    cc = tree_circuit(parent, cpts)
    configs = np.array(list(itertools.product(*[range(k) for k in CARDS])), dtype=float)
    ll = log_likelihood(cc, configs)
    expected = np.array([brute_force_log_prob(x, parent, cpts) for x in configs])
    np.testing.assert_allclose(ll, expected, atol=1e-10)
    assert abs(np.exp(ll).sum() - 1.0) < 1e-10
    # x1 and x4 missing: the circuit's marginal is the sum over their states
    partial = configs[:6].copy()
    partial[:, [1, 4]] = np.nan
    for row, value in zip(partial, log_likelihood(cc, partial)):
        match = (configs[:, [0, 2, 3]] == row[[0, 2, 3]]).all(axis=1)
        assert value == pytest.approx(np.log(np.exp(expected[match]).sum()), abs=1e-10)


def test_weak_edges_are_left_out_and_the_forest_is_exact():
    """x4 drawn independently of the rest: BIC leaves its edge out, so the forest has two trees
    (x0's and x4 alone); with no penalty the spanning tree joins them. The forest's circuit is
    the product of its trees' distributions, by enumeration."""
    X = sample_tree(2000, seed=4)
    X[:, 4] = np.random.default_rng(5).integers(0, 2, len(X))
    parent, cpts = chow_liu(X, CARDS)
    assert list(parent < 0) == [True, False, False, False, True]
    assert (chow_liu(X, CARDS, penalty=0.0)[0] < 0).sum() == 1
    c = Circuit(SCHEMA)
    roots = add_tree(c, list(range(len(CARDS))), parent, cpts)
    assert len(roots) == 2
    c.product(roots)
    c.validate()
    configs = np.array(list(itertools.product(*[range(k) for k in CARDS])), dtype=float)
    expected = np.array([brute_force_log_prob(x, parent, cpts) for x in configs])
    np.testing.assert_allclose(log_likelihood(CompiledCircuit(c), configs), expected, atol=1e-10)


def test_an_edge_pays_for_its_parameters_by_both_variables_states():
    """A binary and a 4-state column, weakly dependent: the edge is kept just below the penalty at
    which n * I = log(n) / 2 * (2 - 1)(4 - 1) and left out just above it."""
    rng = np.random.default_rng(6)
    a = rng.integers(0, 2, 3000)
    b = np.where(rng.random(3000) < 0.05, a, rng.integers(0, 4, 3000))
    X, cards = np.stack([a, b], axis=1).astype(float), [2, 4]
    counts, offsets = pair_counts(X, cards)
    at = len(X) * mutual_information(counts, offsets)[0, 1] / (0.5 * np.log(len(X)) * 3)
    assert (chow_liu(X, cards, penalty=0.99 * at)[0] < 0).sum() == 1  # one tree
    assert (chow_liu(X, cards, penalty=1.01 * at)[0] < 0).sum() == 2  # two roots


def test_unsmoothed_log_likelihood_is_the_chow_liu_closed_form():
    """Mean training log-likelihood = -sum_v H(X_v) + sum over tree edges of I(X_v; X_parent)."""
    X = sample_tree(3000, seed=2)
    parent, cpts = chow_liu(X, CARDS, alpha=1e-12)
    counts, offsets = pair_counts(X, CARDS)
    mi = mutual_information(counts, offsets)
    entropy = 0.0
    for v in range(len(CARDS)):
        p = np.bincount(X[:, v].astype(int), minlength=CARDS[v]) / len(X)
        entropy += -(p[p > 0] * np.log(p[p > 0])).sum()
    closed = -entropy + sum(mi[v, p] for v, p in enumerate(parent) if p >= 0)
    assert log_likelihood(tree_circuit(parent, cpts), X).mean() == pytest.approx(closed, abs=1e-8)


def test_learnspn_with_tree_leaves_saves_loads_and_answers_queries(tmp_path):
    X = sample_tree(4000, seed=3)
    train = pd.DataFrame(X, columns=SCHEMA.names)
    trees = LearnSPN(min_instances_slice=10_000, leaf_model="chow-liu").fit(train, SCHEMA)
    flat = LearnSPN(min_instances_slice=10_000).fit(train, SCHEMA)
    assert trees.score(train) > flat.score(train) + 0.3  # the dependencies are real
    trees.save(tmp_path / "m")
    again = LearnSPN.load(tmp_path / "m")
    assert again.leaf_model == "chow-liu"
    np.testing.assert_array_equal(again.score_samples(train), trees.score_samples(train))
    evidence = train.head(5).copy()
    evidence["x2"] = np.nan
    filled = trees.mpe(evidence)
    assert filled["x2"].notna().all() and (filled["x1"] == evidence["x1"]).all()
    draws = trees.sample(2000, seed=1)
    same = (draws[:, 1] % 2 == draws[:, 2]).mean()  # x2 copies x1 mod 2 80% of the time (+ chance)
    assert 0.8 < same < 0.98

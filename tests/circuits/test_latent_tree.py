"""Latent Chow-Liu trees: the Chow-Liu tree at the start, a normalised distribution with exact
marginals, EM that raises the likelihood, and the same file format and queries as any circuit."""

import itertools

import numpy as np
import pandas as pd
import pytest

from fedpgm.circuits import latent_tree
from fedpgm.circuits.chow_liu import chow_liu
from fedpgm.circuits.compiled import CompiledCircuit
from fedpgm.circuits.estimator import LearnSPN, as_matrix
from fedpgm.circuits.latent_tree import add_latent_tree
from fedpgm.circuits.weighted import std_floors
from fedpgm.circuits.queries import log_likelihood
from fedpgm.circuits.structure import Circuit
from fedpgm.errors import FedpgmError

from test_chow_liu import CARDS, SCHEMA, brute_force_log_prob, sample_tree

CONFIGS = np.array(list(itertools.product(*[range(k) for k in CARDS])), dtype=float)  # all 48 rows


def latent_circuit(parent, cpts, states: int, seed: int = 0) -> Circuit:
    c = Circuit(SCHEMA)
    roots = add_latent_tree(c, list(range(len(CARDS))), parent, cpts, states, np.random.default_rng(seed))
    if len(roots) > 1:
        c.product(roots)
    c.validate()
    return c


def test_without_noise_and_one_hidden_state_per_observed_state_it_is_the_chow_liu_tree(monkeypatch):
    """Hidden state z of v stands for observed state z mod r_v: with as many hidden states as the
    widest variable (3), one-hot emissions and no jitter, the sum over hidden states is the tree BN
    (a binary variable's third hidden state copies state 0 and shares its mass)."""
    monkeypatch.setattr(latent_tree, "EMISSION_NOISE", 0.0)
    monkeypatch.setattr(latent_tree, "JITTER", 0.0)
    parent, cpts = chow_liu(sample_tree(800, seed=1), CARDS, penalty=0.0)
    ll = log_likelihood(CompiledCircuit(latent_circuit(parent, cpts, states=3)), CONFIGS)
    expected = np.array([brute_force_log_prob(x, parent, cpts) for x in CONFIGS])
    np.testing.assert_allclose(ll, expected, atol=1e-10)


def brute_force_latent(circuit: Circuit, parent, states: int) -> np.ndarray:
    """p(x) for every row of CONFIGS by summing over all states ** 5 hidden assignments, with the
    emission and transition tables read off the circuit's nodes (leaf/sum ids in add_latent_tree's
    order: per variable, children first, its leaves interleaved with products, then its sums)."""
    emission, transition = {}, {}
    for node in circuit.nodes:
        if hasattr(node, "var"):
            params = node.params
            probs = params["probs"] if "probs" in params else np.array([1 - params["p"], params["p"]])
            emission.setdefault(node.var, []).append(np.asarray(probs, dtype=float).ravel())
    sums = [n for n in circuit.nodes if hasattr(n, "weights")]
    order = [v for v in reversed(latent_tree.breadth_first(parent))]
    at = 0
    for v in order:
        rows = 1 if parent[v] < 0 else states
        transition[v] = np.stack([s.weights for s in sums[at: at + rows]])
        at += rows
    p = np.zeros(len(CONFIGS))
    for z in itertools.product(range(states), repeat=len(CARDS)):
        weight = np.ones(len(CONFIGS))
        for v, u in enumerate(parent):
            weight *= transition[v][0 if u < 0 else z[u], z[v]]
            weight *= np.asarray(emission[v])[z[v]][CONFIGS[:, v].astype(int)]
        p += weight
    return p


def test_the_circuit_is_the_hidden_tree_model_by_enumeration_and_marginalises_exactly():
    parent, cpts = chow_liu(sample_tree(800, seed=2), CARDS, penalty=0.0)
    c = latent_circuit(parent, cpts, states=3, seed=4)
    cc = CompiledCircuit(c)
    ll = log_likelihood(cc, CONFIGS)
    np.testing.assert_allclose(np.exp(ll), brute_force_latent(c, parent, 3), rtol=1e-10)
    assert np.exp(ll).sum() == pytest.approx(1.0, abs=1e-10)
    partial = CONFIGS[:6].copy()
    partial[:, [1, 4]] = np.nan  # x1 and x4 missing: the sum over their states
    for row, value in zip(partial, log_likelihood(cc, partial)):
        match = (CONFIGS[:, [0, 2, 3]] == row[[0, 2, 3]]).all(axis=1)
        assert value == pytest.approx(np.log(np.exp(ll[match]).sum()), abs=1e-10)


def test_em_raises_the_likelihood_beyond_the_chow_liu_tree_on_data_with_a_hidden_cause():
    """Rows drawn from a hidden class that sets every variable's state: no tree over the observed
    variables holds that, a latent tree does after EM (batch EM: every pass raises the training
    likelihood)."""
    rng = np.random.default_rng(3)
    hidden = rng.integers(0, 4, 3000)
    X = np.stack([np.where(rng.random(3000) < 0.85, (hidden + v) % k, rng.integers(0, k, 3000))
                  for v, k in enumerate(CARDS)], axis=1).astype(float)
    train = pd.DataFrame(X[:2000], columns=SCHEMA.names)
    test = pd.DataFrame(X[2000:], columns=SCHEMA.names)
    tree = LearnSPN(min_instances_slice=10_000, leaf_model="chow-liu").fit(train, SCHEMA)
    model = LearnSPN(min_instances_slice=10_000, leaf_model="latent-tree", latent_states=4).fit(train, SCHEMA)
    Xtrain = as_matrix(train, SCHEMA)
    floors = std_floors(Xtrain)
    scores = [model.score(train)]
    for k in range(15):
        model.em_pass(model.circuit_, Xtrain, k, floors)
        model.compiled_ = model._compile(model.circuit_)
        scores.append(model.score(train))
    assert all(b >= a - 1e-9 for a, b in zip(scores, scores[1:]))  # batch EM never lowers it
    assert model.score(test) > tree.score(test) + 0.1
    again = LearnSPN(min_instances_slice=10_000, leaf_model="latent-tree", latent_states=4,
                     em_iterations=15).fit(train, SCHEMA)  # the same passes in one fit
    assert again.score(test) == pytest.approx(model.score(test), abs=1e-9)


def test_learnspn_with_latent_trees_saves_loads_and_answers_queries(tmp_path):
    train = pd.DataFrame(sample_tree(3000, seed=5), columns=SCHEMA.names)
    model = LearnSPN(min_instances_slice=1000, leaf_model="latent-tree", latent_states=3, em_iterations=2,
                     em_batch_size=256).fit(train, SCHEMA)
    assert model.circuit_.stats()["n_sums"] > 3  # trees at the leaves of a LearnSPN
    model.save(tmp_path / "m")
    again = LearnSPN.load(tmp_path / "m")
    assert (again.leaf_model, again.latent_states, again.em_batch_size) == ("latent-tree", 3, 256)
    np.testing.assert_array_equal(again.score_samples(train), model.score_samples(train))
    evidence = train.head(5).copy()
    evidence["x2"] = np.nan
    filled = model.mpe(evidence)
    assert filled["x2"].notna().all() and (filled["x1"] == evidence["x1"]).all()
    with pytest.raises(FedpgmError, match="latent_states"):
        LearnSPN(leaf_model="latent-tree", latent_states=0).fit(train, SCHEMA)


def test_a_one_state_variable_takes_its_one_state():
    """A categorical column with one category (a constant column of a user's table: stevedata's
    eq_passengercars crashed the selection with a division by zero) is a leaf certain of it."""
    from fedpgm.data.schema import Feature, Schema

    schema = Schema((Feature("a", "categorical", ("x", "y", "z")), Feature("one", "categorical", ("only",)),
                     Feature("b", "binary", ("0", "1"))))
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, 400)
    train = pd.DataFrame({"a": a, "one": np.zeros(400), "b": (a == 2) ^ (rng.random(400) < 0.1)}, dtype=float)
    model = LearnSPN(min_instances_slice=401, leaf_model="latent-tree", latent_states=3).fit(train, schema)
    grid = pd.DataFrame([(x, 0, y) for x in range(3) for y in range(2)], columns=schema.names, dtype=float)
    assert np.exp(model.score_samples(grid)).sum() == pytest.approx(1.0, abs=1e-9)

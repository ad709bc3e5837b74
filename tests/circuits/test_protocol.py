"""The circuit model protocol: node and dense circuits answer the same queries, and files of
either are written and read through the format registry."""

import itertools
import math

import numpy as np
import pytest

from fedpgm.circuits.dense import DenseCircuit
from fedpgm.circuits.io import FORMATS, load_circuit, save_circuit
from fedpgm.circuits.learners import log_likelihood_of
from fedpgm.circuits.protocol import CircuitModel
from fedpgm.circuits.region_graph import binary_trees
from fedpgm.circuits.semiring import Semiring
from fedpgm.circuits.structure import Circuit
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError

SCHEMA = Schema((Feature("a", "binary", ("no", "yes")), Feature("x", "continuous")))


def mixture() -> Circuit:
    """0.3 [a ~ Bernoulli(0.9)] [x ~ N(2, 1)] + 0.7 [a ~ Bernoulli(0.2)] [x ~ N(-1, 0.5)]."""
    c = Circuit(SCHEMA)
    first = c.product([c.leaf(0, "bernoulli", {"p": 0.9}), c.leaf(1, "gaussian", {"mean": 2.0, "std": 1.0})])
    second = c.product([c.leaf(0, "bernoulli", {"p": 0.2}), c.leaf(1, "gaussian", {"mean": -1.0, "std": 0.5})])
    c.sum([first, second], [0.3, 0.7])
    return c


def normal(x: float, mean: float, std: float) -> float:
    return math.exp(-0.5 * ((x - mean) / std) ** 2) / (std * math.sqrt(2 * math.pi))


def dense() -> DenseCircuit:
    """A random RAT-SPN-shaped dense circuit over 3 binary variables (no schema: width 3)."""
    return DenseCircuit(binary_trees(3, 1, 2, seed=0), units=2, input_kind="bernoulli", seed=3)


def test_both_circuit_kinds_are_circuit_models_with_a_registered_format():
    for circuit in (mixture(), dense()):
        assert isinstance(circuit, CircuitModel)
        assert FORMATS[circuit.format].dense is circuit.dense
    assert sorted(FORMATS) == ["fedpgm-circuit/1", "fedpgm-dense-circuit/1"]


def test_a_node_circuit_answers_likelihoods_marginals_mpe_and_samples_exactly():
    c = mixture()
    X = np.array([[1.0, 1.5], [0.0, np.nan], [np.nan, -1.0]])
    want = [math.log(0.3 * 0.9 * normal(1.5, 2, 1) + 0.7 * 0.2 * normal(1.5, -1, 0.5)),
            math.log(0.3 * 0.1 + 0.7 * 0.8),
            math.log(0.3 * normal(-1.0, 2, 1) + 0.7 * normal(-1.0, -1, 0.5))]
    np.testing.assert_allclose(c.log_likelihood(X), want, rtol=1e-10)
    # the most probable explanation of x given a = no: the second component's mean
    assert c.complete(np.array([[0.0, np.nan]]), Semiring.MAX).tolist() == [[0.0, -1.0]]
    filled = c.complete(np.array([[np.nan, 2.0]] * 4000), "sample", seed=1)
    assert (filled[:, 1] == 2.0).all() and set(np.unique(filled[:, 0])) == {0.0, 1.0}
    first = 0.3 * normal(2.0, 2, 1) / (0.3 * normal(2.0, 2, 1) + 0.7 * normal(2.0, -1, 0.5))
    assert abs(filled[:, 0].mean() - (first * 0.9 + (1 - first) * 0.2)) < 0.03
    draws = c.sample(20_000, seed=2)
    assert draws.shape == (20_000, 2) and abs(draws[:, 0].mean() - (0.3 * 0.9 + 0.7 * 0.2)) < 0.01


def test_a_dense_circuit_answers_the_same_queries_over_its_width():
    model = dense()
    domain = np.array(list(itertools.product([0.0, 1.0], repeat=3)))
    p = np.exp(model.log_likelihood(domain))
    assert model.width == 3 and abs(p.sum() - 1) < 1e-5
    marginal = np.exp(model.log_likelihood(np.array([[1.0, np.nan, 0.0]])))[0]
    assert abs(marginal - p[(domain[:, 0] == 1) & (domain[:, 2] == 0)].sum()) < 1e-5
    best = model.complete(np.array([[np.nan, 1.0, np.nan]]), Semiring.MAX)
    assert best[0, 1] == 1.0 and set(best[0]) <= {0.0, 1.0}
    draws = model.sample(20_000, seed=4)
    freq = [(draws == row).all(1).mean() for row in domain]
    np.testing.assert_allclose(freq, p, atol=0.012)
    with pytest.raises(FedpgmError, match="expected rows of 3 columns"):
        model.log_likelihood(np.zeros((2, 4)))


@pytest.mark.parametrize("make", [mixture, dense], ids=["nodes", "dense"])
def test_either_kind_is_saved_and_read_through_the_registry(tmp_path, make):
    circuit = make()
    if circuit.dense:
        circuit.schema = Schema(tuple(Feature(f"v{i}", "binary", ("0", "1")) for i in range(3)))
    X = np.array([[1.0, 0.0, 1.0], [0.0, np.nan, 1.0]])[:, :circuit.width]
    again, meta = load_circuit(save_circuit(circuit, tmp_path / "c"))
    assert type(again) is type(circuit) and meta == {}
    np.testing.assert_array_equal(again.log_likelihood(X), circuit.log_likelihood(X))
    # columns a caller lacks are marginalised, whichever the kind
    names = circuit.schema.names
    np.testing.assert_allclose(log_likelihood_of(again, names[:1], X[:, :1]),
                               circuit.log_likelihood(np.column_stack([X[:, :1], np.full((2, len(names) - 1), np.nan)])))

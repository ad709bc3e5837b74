import numpy as np
import pytest
from conftest import all_assignments, discrete_schema, random_circuit

from fedpgm.circuits import Circuit, CompiledCircuit, product_of, sum_of
from fedpgm.circuits.queries import log_likelihood
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError


def test_validation_names_the_offending_node():
    s = discrete_schema()
    c = Circuit(s)
    a = c.leaf(0, "bernoulli", {"p": 0.3})
    b = c.leaf(1, "categorical", {"probs": [0.2, 0.3, 0.5]})
    c.sum([a, b], [0.5, 0.5])
    with pytest.raises(FedpgmError, match=r"node 2 \(sum\) is not smooth"):
        c.validate()
    c = Circuit(s)
    a = c.leaf(0, "bernoulli", {"p": 0.3})
    a2 = c.leaf(0, "bernoulli", {"p": 0.6})
    c.product([a, a2])
    with pytest.raises(FedpgmError, match=r"node 2 \(product\) is not decomposable"):
        c.validate()
    c = Circuit(s)
    c.leaf(1, "gaussian", {"mean": 0.0, "std": 1.0})
    with pytest.raises(FedpgmError, match="a gaussian leaf cannot model categorical variable 'v1'"):
        c.validate()
    c = Circuit(s)
    c.leaf(1, "categorical", {"probs": [0.5, 0.5]})
    with pytest.raises(FedpgmError, match="has 2 states; the variable has 3"):
        c.validate()
    with pytest.raises(FedpgmError, match="refers to child 7"):
        Circuit(s).product([7])


def test_sum_and_product_composition_are_exact():
    s = discrete_schema()
    c1, c2 = random_circuit(s, 1), random_circuit(s, 2)
    X = all_assignments(s)
    p1 = np.exp(log_likelihood(CompiledCircuit(c1), X))
    p2 = np.exp(log_likelihood(CompiledCircuit(c2), X))
    mix = sum_of([c1, c2], [3, 1])
    np.testing.assert_allclose(np.exp(log_likelihood(CompiledCircuit(mix), X)), 0.75 * p1 + 0.25 * p2, rtol=1e-12)
    left = Schema(s.features[:2])
    right = Schema(s.features[2:])
    cl, cr = random_circuit(left, 3), random_circuit(right, 4)
    joint = product_of([cl, cr])
    assert joint.schema.names == s.names
    pl = np.exp(log_likelihood(CompiledCircuit(cl), X[:, :2]))
    pr = np.exp(log_likelihood(CompiledCircuit(cr), X[:, 2:]))
    np.testing.assert_allclose(np.exp(log_likelihood(CompiledCircuit(joint), X)), pl * pr, rtol=1e-12)
    with pytest.raises(FedpgmError, match="not decomposable"):
        product_of([c1, c2])
    with pytest.raises(FedpgmError, match="not smooth"):
        sum_of([cl, cr])


def test_composition_refuses_type_clashes():
    a = Schema((Feature("x", "continuous"),))
    b = Schema((Feature("x", "binary", ("0", "1")),))
    ca, cb = Circuit(a), Circuit(b)
    ca.leaf(0, "gaussian", {"mean": 0, "std": 1})
    cb.leaf(0, "bernoulli", {"p": 0.5})
    with pytest.raises(FedpgmError, match="different types"):
        sum_of([ca, cb], schema=a)

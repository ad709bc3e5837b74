"""One RAT-SPN: the node form is the node circuit of RAT-SPN's region graph, and that builder
serves any region graph."""

import numpy as np
import pytest

from fedpgm.circuits.nodes import Product
from fedpgm.circuits.compiled import CompiledCircuit
from fedpgm.circuits.queries import log_likelihood
from fedpgm.circuits.ratspn import rat_spn, region_circuit
from fedpgm.circuits.region_graph import binary_trees, poon_domingos
from fedpgm.data import load_dataset
from fedpgm.data.schema import Feature, Schema


@pytest.fixture(scope="module")
def mixed():
    return load_dataset("synthetic:mixed", rows=1000, seed=0)

def test_rat_spn_is_the_region_circuit_of_binary_trees(mixed):
    X = mixed.train[mixed.schema.names].to_numpy()
    a = rat_spn(mixed.schema, X, depth=2, repetitions=3, n_sums=2, n_inputs=3, seed=4)
    b = region_circuit(mixed.schema, X, binary_trees(len(mixed.schema), 2, 3, 4), n_sums=2, n_inputs=3, seed=4)
    assert len(a.nodes) == len(b.nodes) > 50
    test = mixed.test[mixed.schema.names].to_numpy()
    np.testing.assert_array_equal(log_likelihood(CompiledCircuit(a), test), log_likelihood(CompiledCircuit(b), test))


def test_any_region_graph_becomes_a_valid_node_circuit_whose_splits_are_its_partitions():
    schema = Schema(tuple(Feature(f"pixel_{r}_{c}", "continuous") for r in range(2) for c in range(3)))
    X = np.random.default_rng(0).normal(size=(200, 6))
    graph = poon_domingos((2, 3), 2)
    c = region_circuit(schema, X, graph, n_sums=2, n_inputs=2, seed=1)
    scopes = c.scopes()
    leaves = {frozenset(graph.regions[r]) for r in graph.leaves()}
    splits = {frozenset((scopes[n.children[0]], scopes[n.children[1]])) for i, n in enumerate(c.nodes)
              if isinstance(n, Product) and scopes[i] not in leaves}
    assert splits == {frozenset((frozenset(graph.regions[a]), frozenset(graph.regions[b])))
                      for _, a, b in graph.partitions}
    assert c.scope == frozenset(range(6))
    ll = c.log_likelihood(X)
    assert np.isfinite(ll).all() and c.log_likelihood(np.full((1, 6), np.nan))[0] == 0.0  # normalised

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError
from fedpgm.ngm.graph import (association_matrix, common_features, correlation_ratio, cramers_v, from_edges,
                              glasso_graph, merge_graphs, plot_graphs)


def ggm_data(n=4000, seed=0):
    """A Gaussian graphical model on 8 variables whose precision matrix is a ring plus a chord."""
    d = 8
    theta = np.eye(d)
    edges = [(i, (i + 1) % d) for i in range(d)] + [(0, 4)]
    for i, j in edges:
        theta[i, j] = theta[j, i] = 0.35
    X = np.random.default_rng(seed).multivariate_normal(np.zeros(d), np.linalg.inv(theta), n)
    names = [f"x{i}" for i in range(d)]
    return pd.DataFrame(X, columns=names), Schema(tuple(Feature(n, "continuous") for n in names)), \
        {frozenset((names[i], names[j])) for i, j in edges}


def test_glasso_recovers_the_true_edges_of_a_gaussian_graphical_model():
    frame, schema, truth = ggm_data()
    G = glasso_graph(frame, schema, sparsity=len(truth) / 28)
    found = {frozenset(e) for e in G.edges()}
    precision = len(found & truth) / len(found)
    recall = len(found & truth) / len(truth)
    print(f"GGM recovery: precision {precision:.2f} recall {recall:.2f}")
    assert precision >= 0.85 and recall >= 0.85


def test_association_measures_on_known_pairs():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, 5000)
    assert cramers_v(a, a) == pytest.approx(1.0, abs=1e-3)
    assert cramers_v(a, rng.integers(0, 4, 5000)) < 0.03
    v = a * 2.0 + rng.normal(0, 0.01, 5000)
    assert correlation_ratio(a, v) == pytest.approx(1.0, abs=1e-3)
    assert correlation_ratio(a, rng.normal(size=5000)) < 0.05
    schema = Schema((Feature("c", "categorical", ("a", "b", "c")), Feature("v", "continuous"),
                     Feature("w", "continuous")))
    frame = pd.DataFrame({"c": a.astype(float), "v": v, "w": -v + rng.normal(0, 0.1, 5000)})
    A = association_matrix(frame, schema)
    assert np.allclose(A, A.T) and np.allclose(np.diag(A), 1)
    assert A[1, 2] > 0.99 and A[0, 1] > 0.99


def test_merge_keeps_shared_nodes_and_the_union_of_edges(tmp_path):
    g1 = from_edges(["a", "b", "c", "x"], [["a", "b"], ["b", "x"]])
    g2 = from_edges(["a", "b", "c", "y"], [["b", "c"], ["a", "y"], ["a", "b"]])
    s1 = Schema(tuple(Feature(n, "continuous") for n in "abcx"))
    s2 = Schema(tuple(Feature(n, "continuous") for n in "abcy"))
    shared = common_features([s1, s2])
    assert shared == ["a", "b", "c"]
    merged = merge_graphs([g1, g2], shared)
    assert sorted(merged.nodes()) == ["a", "b", "c"]
    assert {frozenset(e) for e in merged.edges()} == {frozenset("ab"), frozenset("bc")}
    assert plot_graphs({"one": g1, "merged": merged}, tmp_path / "g.png").stat().st_size > 1000


def test_graph_errors_are_clear():
    with pytest.raises(FedpgmError, match="no feature in common"):
        common_features([Schema((Feature("a", "continuous"),)), Schema((Feature("b", "continuous"),))])
    with pytest.raises(FedpgmError, match="not in"):
        from_edges(["a", "b"], [["a", "z"]])
    with pytest.raises(FedpgmError, match="self-loop"):
        from_edges(["a", "b"], [["a", "a"]])
    assert isinstance(from_edges(["a"], []), nx.Graph)

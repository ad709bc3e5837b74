import networkx as nx
import numpy as np
import pytest

from fedpgm.concepts.graphs import aggregate, client_subgraphs, diff_pairs, from_edge_list, perturb
from fedpgm.data import load_dataset
from fedpgm.errors import FedpgmError


def dag(*edges):
    g = nx.DiGraph()
    g.add_edges_from(edges)
    return g


def test_vote_weighted_by_data_size_and_only_by_observers():
    a = dag(("x", "y"), ("y", "t"))
    b = dag(("y", "x"), ("y", "t"))
    c = dag(("z", "t"))  # observes neither x nor y: no vote on {x, y}
    agg = aggregate([a, b, c], [10, 30, 1000], task="t")
    assert agg.graph.has_edge("y", "x") and not agg.graph.has_edge("x", "y")
    assert agg.weights[("y", "x")] == pytest.approx(0.75)
    assert agg.graph.has_edge("z", "t") and agg.graph.has_edge("y", "t")


def test_ties_are_broken_by_a_seeded_draw():
    a, b = dag(("x", "y")), dag(("y", "x"))
    outcomes = {tuple(sorted(aggregate([a, b], [1, 1], task="t", seed=s).graph.edges())) for s in range(20)}
    assert outcomes == {(("x", "y"),), (("y", "x"),)}  # both directions happen ...
    again = [tuple(aggregate([a, b], [1, 1], task="t", seed=3).graph.edges()) for _ in range(3)]
    assert len(set(again)) == 1  # ... and the same seed gives the same graph


def test_cycles_lose_their_weakest_edge_and_the_task_stays_a_sink():
    # each client is a DAG; their votes make the cycle x -> y -> z -> x
    graphs = [dag(("x", "y")), dag(("y", "z")), dag(("z", "x")), dag(("x", "z")), dag(("t", "x"), ("x", "y"))]
    agg = aggregate(graphs, [5, 4, 3, 1, 2], task="t")
    assert agg.weights[("x", "y")] == 1.0 and agg.weights[("y", "z")] == 1.0
    assert agg.removed == [{"edge": ["z", "x"], "weight": pytest.approx(3 / 4)}]
    assert nx.is_directed_acyclic_graph(agg.graph)
    assert agg.graph.out_degree("t") == 0 and sorted(agg.graph.edges()) == [("x", "y"), ("y", "z")]


def test_client_subgraphs_cover_the_network_and_perturbations_stay_acyclic():
    ds = load_dataset("bn:alarm", rows=200, seed=0)
    rng = np.random.default_rng(0)
    graphs = client_subgraphs(ds.graph, "BP", 6, rng)
    assert set().union(*(g.nodes() for g in graphs)) == set(ds.graph.nodes())
    assert any("BP" in g for g in graphs)
    for g in graphs:
        if "BP" in g:
            assert nx.ancestors(ds.graph, "BP") <= set(g.nodes())  # the task's ancestor paths
        p = perturb(g, 0.3, rng, task="BP")
        assert nx.is_directed_acyclic_graph(p) and ("BP" not in p or p.out_degree("BP") == 0)
    with pytest.raises(FedpgmError, match="task node 'nope'"):
        client_subgraphs(ds.graph, "nope", 3, rng)


def test_diff_pairs_sanity_cases():
    chain = dag(("a", "b"), ("b", "c"))
    assert diff_pairs(chain, chain)["diff_pairs"] == 0
    reversed_chain = dag(("c", "b"), ("b", "a"))
    assert diff_pairs(chain, reversed_chain) == {"diff_pairs": 3, "reversals": 3, "normalised": 1.0}
    empty = nx.DiGraph()
    empty.add_nodes_from("abc")
    assert diff_pairs(chain, empty)["diff_pairs"] == 3 and diff_pairs(chain, empty)["reversals"] == 0


def test_bad_client_graphs_fail_clearly():
    with pytest.raises(FedpgmError, match="cycle"):
        aggregate([dag(("a", "b"), ("b", "a"))], [1], task="t")
    with pytest.raises(FedpgmError, match="unknown node"):
        from_edge_list({"nodes": ["a", "q"], "edges": [["a", "q"]]}, known={"a", "b"}, who="client-3")

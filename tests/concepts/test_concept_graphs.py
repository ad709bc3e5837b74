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


def test_confidence_weighted_votes_follow_the_papers_formula():
    """Sec. 4.2.1: S-bar_ij = sum_k alpha_k S^(k)_ij over clients observing i and j, and
    S-bar(none) = sum_k alpha_k (1 - S_ij - S_ji); the largest of the three wins."""
    from fedpgm.concepts.graphs import confidence_from_doc

    a, b, c = dag(("x", "y")), dag(("y", "x")), dag(("x", "y"))
    S = [confidence_from_doc({"edges": [["x", "y", 0.4]]}, a, "a"),
         confidence_from_doc({"edges": [["y", "x", 0.9]]}, b, "b"),
         confidence_from_doc({"edges": [["x", "y", 0.3], ["y", "x", 0.1]]}, c, "c")]
    alpha = [10, 20, 30]
    # x->y: 10*.4 + 30*.3 = 13; y->x: 20*.9 + 30*.1 = 21; none: 10*.6 + 20*.1 + 30*.6 = 26 -> no edge
    assert list(aggregate([a, b, c], alpha, task="t", confidences=S).graph.edges()) == []
    alpha = [10, 40, 30]  # y->x: 36 + 3 = 39; none: 6 + 4 + 18 = 28; x->y: 13 -> y->x, share 39 / 80
    agg = aggregate([a, b, c], alpha, task="t", confidences=S)
    assert list(agg.graph.edges()) == [("y", "x")] and agg.weights[("y", "x")] == pytest.approx(39 / 80)
    # without confidences S = A: x->y gets 10 + 30 = 40 of 80 against y->x's 40: a tie, drawn
    binary = aggregate([a, b, c], alpha, task="t", confidences=[{("x", "y"): 1.0}, {("y", "x"): 1.0},
                                                                 {("x", "y"): 1.0}])
    assert binary.graph.edges() == aggregate([a, b, c], alpha, task="t").graph.edges()
    with pytest.raises(FedpgmError, match=r"S\[x, y\] \+ S\[y, x\] = 1.3 > 1"):
        confidence_from_doc({"edges": [["x", "y", 0.6], ["y", "x", 0.7]]}, a, "a")
    with pytest.raises(FedpgmError, match="names a node it does not observe"):
        confidence_from_doc({"edges": [["x", "q", 0.5]]}, a, "a")


def test_pairs_nobody_observes_keep_their_last_state():
    first = aggregate([dag(("x", "y"), ("y", "t")), dag(("z", "t"))], [1, 1], task="t")
    later = aggregate([dag(("z", "t"))], [1], task="t", previous=first)  # nobody observes x or y now
    assert sorted(later.graph.edges()) == [("x", "y"), ("y", "t"), ("z", "t")]
    flipped = aggregate([dag(("y", "x"))], [1], task="t", previous=first)  # a voter on {x, y} decides
    assert flipped.graph.has_edge("y", "x") and not flipped.graph.has_edge("x", "y")


def test_a_learned_graph_finds_the_dependencies_and_keeps_the_task_a_sink():
    from fedpgm.concepts.graphs import learn_graph

    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, 2000)
    b = np.where(rng.random(2000) < 0.9, a, 1 - a)  # b copies a 90% of the time
    y = np.where(rng.random(2000) < 0.9, b, 1 - b)  # the task copies b
    z = rng.integers(0, 3, 2000)  # unrelated
    g = learn_graph(np.stack([y, a, b, z], axis=1), ["y", "a", "b", "z"], task="y")
    assert set(g.nodes()) == {"y", "a", "b", "z"} and nx.is_directed_acyclic_graph(g)
    skeleton = {frozenset(e) for e in g.edges()}
    assert skeleton == {frozenset("ab"), frozenset("by")}
    assert g.out_degree("y") == 0 and g.has_edge("b", "y")  # (y -> b alone scores the same: forbidden)

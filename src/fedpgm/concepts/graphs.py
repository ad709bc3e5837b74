"""Concept graphs for F-CMs: client subgraphs, perturbation, the server's aggregation, DiffPairs.

- ``client_subgraphs``: K subgraphs of the true DAG (Fenoglio et al., App. B): each holds the
  task's ancestor paths to the roots plus the ancestor paths of a few random non-root concepts;
  the task is removed from some clients; together they cover every node.
- ``perturb``: flip, remove or add a fraction p of a graph's edges, keeping it acyclic and the
  task a sink.
- ``aggregate`` (Sec. 4.2.1): for each unordered pair, the clients observing both nodes vote,
  weighted by their data size (alpha_k), among i->j, j->i and no edge: client k adds alpha_k
  S_ij, alpha_k S_ji and alpha_k (1 - S_ij - S_ji), where S is its edge-confidence matrix
  (``confidences``; without one, S = its adjacency matrix A). Ties are broken by a seeded draw.
  A pair no voter observes keeps its state in ``previous`` (the last round's graph: the
  federation is monotone, so dependency information is retained when its holders are not
  sampled). Edges leaving the task are dropped, then cycles are removed by repeatedly deleting
  the weakest edge (lowest vote share) on a cycle. The log of removed edges is returned.
- ``diff_pairs``: pairs of nodes whose ancestor relation differs between two DAGs.
- ``learn_graph``: a DAG learned from concept and task codes (hill climbing on BIC, the task a
  sink): a client's graph on a user's table, where no network gives one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import networkx as nx
import numpy as np

from fedpgm.errors import FedpgmError


def ancestral_closure(dag: nx.DiGraph, nodes) -> set:
    """``nodes`` and all their ancestors."""
    out = set()
    for n in nodes:
        out |= {n} | nx.ancestors(dag, n)
    return out


def client_subgraphs(dag: nx.DiGraph, task: str, k: int, rng: np.random.Generator,
                     extra: int = 2, drop_task: float = 0.3) -> list[nx.DiGraph]:
    """K induced subgraphs of ``dag`` covering every node (see the module doc)."""
    if task not in dag:
        raise FedpgmError(f"task node '{task}' is not in the network; nodes are {sorted(dag.nodes())}")
    concepts = [n for n in dag.nodes() if n != task]
    non_roots = [n for n in concepts if dag.in_degree(n) > 0] or concepts
    graphs = []
    for _ in range(k):
        picks = list(rng.choice(non_roots, size=min(extra, len(non_roots)), replace=False))
        graphs.append(ancestral_closure(dag, [task] + picks))
    missed = [n for n in dag.nodes() if not any(n in g for g in graphs)]
    for i, n in enumerate(missed):  # cover every node: give it (with its ancestors) to a client
        graphs[i % k] |= ancestral_closure(dag, [n])
    drop = rng.random(k) < drop_task
    if drop.all():
        drop[rng.integers(k)] = False  # someone keeps the task
    out = []
    for nodes, d in zip(graphs, drop):
        if d and len(nodes) > 1:
            nodes = nodes - {task}
        out.append(dag.subgraph(nodes).copy())
    return out


def perturb(g: nx.DiGraph, p: float, rng: np.random.Generator, task: str | None = None) -> nx.DiGraph:
    """``g`` with a fraction ``p`` of its edges flipped, removed or replaced by a random new edge
    (one of the three at random), never creating a cycle nor an edge out of the task."""
    out = g.copy()
    edges = list(out.edges())
    n_change = int(round(p * len(edges)))
    for idx in rng.permutation(len(edges))[:n_change]:
        u, v = edges[idx]
        if not out.has_edge(u, v):
            continue
        action = rng.integers(3)
        out.remove_edge(u, v)
        if action == 0 and u != task:  # flip
            out.add_edge(v, u)
            if not nx.is_directed_acyclic_graph(out):
                out.remove_edge(v, u)
                out.add_edge(u, v)
        elif action == 2:  # add a random edge elsewhere
            nodes = list(out.nodes())
            for _ in range(20):
                a, b = rng.choice(nodes, 2, replace=False)
                if a == task or out.has_edge(a, b) or out.has_edge(b, a):
                    continue
                out.add_edge(a, b)
                if nx.is_directed_acyclic_graph(out):
                    break
                out.remove_edge(a, b)
    return out


@dataclass
class Aggregated:
    """The aggregated DAG, each kept edge's vote share, and the edges removed to break cycles."""

    graph: nx.DiGraph
    weights: dict = field(default_factory=dict)
    removed: list = field(default_factory=list)


def check_client_graph(g: nx.DiGraph, known: set | None, who: str) -> None:
    if not nx.is_directed_acyclic_graph(g):
        raise FedpgmError(f"{who}'s concept graph has a cycle ({nx.find_cycle(g)}); send a DAG")
    if known is not None:
        unknown = sorted(set(g.nodes()) - known)
        if unknown:
            raise FedpgmError(f"{who}'s concept graph names unknown node(s) {unknown}")


def adjacency_confidence(g: nx.DiGraph) -> dict[tuple[str, str], float]:
    """S = A: confidence 1 for each of the graph's edges (0 elsewhere)."""
    return {(u, v): 1.0 for u, v in g.edges()}


def confidence_from_doc(doc: dict, g: nx.DiGraph, who: str) -> dict[tuple[str, str], float]:
    """A client's edge-confidence matrix S from ``{"edges": [[i, j, S_ij], ...]}`` (pairs not
    listed: 0), over the nodes of its graph ``g``; each S_ij in [0, 1], S_ij + S_ji <= 1."""
    if not isinstance(doc, dict) or not isinstance(doc.get("edges"), list):
        raise FedpgmError(f"{who}'s edge-confidence matrix must be a JSON object with 'edges': [[i, j, S_ij], ...]")
    S: dict[tuple[str, str], float] = {}
    for e in doc["edges"]:
        if not isinstance(e, (list, tuple)) or len(e) != 3 or not isinstance(e[2], (int, float)):
            raise FedpgmError(f"{who}: confidence entry {e!r} is not [i, j, S_ij]")
        i, j, v = str(e[0]), str(e[1]), float(e[2])
        if i not in g or j not in g or i == j:
            raise FedpgmError(f"{who}: confidence entry {e!r} names a node it does not observe, or a self-loop")
        if not 0.0 <= v <= 1.0:
            raise FedpgmError(f"{who}: confidence of {i} -> {j} is {v}; it must lie in [0, 1]")
        S[(i, j)] = v
    for (i, j), v in S.items():
        if v + S.get((j, i), 0.0) > 1.0 + 1e-9:
            raise FedpgmError(f"{who}: S[{i}, {j}] + S[{j}, {i}] = {v + S[(j, i)]:.3g} > 1; they are the "
                              "probabilities of two exclusive outcomes")
    return S


def aggregate(graphs: list[nx.DiGraph], sizes: Sequence[float], task: str, seed: int = 0,
              confidences: list[dict] | None = None, previous: "Aggregated | None" = None) -> Aggregated:
    """Weighted three-way vote per pair (S = A unless ``confidences``, one S per graph), pairs
    nobody observes kept as in ``previous``, task kept a sink, cycles broken at their weakest edge."""
    if len(graphs) != len(sizes) or (confidences is not None and len(confidences) != len(graphs)):
        raise FedpgmError("aggregate needs one data size (and confidence matrix) per client graph")
    for i, g in enumerate(graphs):
        check_client_graph(g, None, f"client {i}")
    scores = confidences or [adjacency_confidence(g) for g in graphs]
    rng = np.random.default_rng(seed)
    kept = previous.graph if previous is not None else nx.DiGraph()
    nodes = sorted(set().union(kept.nodes(), *(g.nodes() for g in graphs)))
    G = nx.DiGraph()
    G.add_nodes_from(nodes)
    weights = {}
    for a_i, a in enumerate(nodes):
        for b in nodes[a_i + 1:]:
            votes = np.zeros(3)  # a->b, b->a, none
            for g, S, w in zip(graphs, scores, sizes):
                if a in g and b in g:
                    ab, ba = S.get((a, b), 0.0), S.get((b, a), 0.0)
                    votes += w * np.array([ab, ba, 1.0 - ab - ba])
            if votes.sum() == 0:  # no voter this time: the pair keeps its last state
                for u, v in ((a, b), (b, a)):
                    if kept.has_edge(u, v):  # (so previous is not None)
                        G.add_edge(u, v)
                        weights[(u, v)] = previous.weights.get((u, v), 1.0) if previous is not None else 1.0
                continue
            best = np.flatnonzero(votes == votes.max())
            choice = int(best[rng.integers(len(best))]) if len(best) > 1 else int(best[0])
            if choice == 2:
                continue
            u, v = (a, b) if choice == 0 else (b, a)
            if u == task:
                continue  # the task stays a sink
            G.add_edge(u, v)
            weights[(u, v)] = float(votes[choice] / votes.sum())
    removed = []
    while not nx.is_directed_acyclic_graph(G):
        cycle = nx.find_cycle(G)
        u, v = min(((e[0], e[1]) for e in cycle), key=lambda e: (weights[e], e))
        G.remove_edge(u, v)
        removed.append({"edge": [u, v], "weight": weights.pop((u, v))})
    return Aggregated(G, weights, removed)


def order_state(closure: dict, a: str, b: str) -> int:
    return 1 if b in closure.get(a, ()) else -1 if a in closure.get(b, ()) else 0


def diff_pairs(true: nx.DiGraph, est: nx.DiGraph, nodes=None) -> dict:
    """Pairs whose ancestor relation (a before b, b before a, unrelated) differs; ``reversals``
    counts pairs ordered both ways; normalised by the number of pairs."""
    nodes = sorted(nodes if nodes is not None else set(true.nodes()) & set(est.nodes()))
    desc_t = {n: nx.descendants(true, n) if n in true else set() for n in nodes}
    desc_e = {n: nx.descendants(est, n) if n in est else set() for n in nodes}
    diff = rev = 0
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            s, t = order_state(desc_t, a, b), order_state(desc_e, a, b)
            diff += s != t
            rev += s * t == -1
    pairs = len(nodes) * (len(nodes) - 1) // 2
    return {"diff_pairs": diff, "reversals": rev, "normalised": diff / pairs if pairs else 0.0}


def to_edge_list(g: nx.DiGraph) -> dict:
    return {"nodes": sorted(g.nodes()), "edges": sorted([u, v] for u, v in g.edges())}


def from_edge_list(doc: dict, known: set | None = None, who: str = "graph") -> nx.DiGraph:
    if not isinstance(doc, dict) or "nodes" not in doc or "edges" not in doc:
        raise FedpgmError(f"{who} must be a JSON object with 'nodes' and 'edges'")
    g = nx.DiGraph()
    g.add_nodes_from(doc["nodes"])
    for e in doc["edges"]:
        if not isinstance(e, (list, tuple)) or len(e) != 2:
            raise FedpgmError(f"{who}: edge {e!r} is not a [parent, child] pair")
        if e[0] not in g or e[1] not in g:
            raise FedpgmError(f"{who}: edge {e} names a node not in its node list")
        g.add_edge(*e)
    check_client_graph(g, known, who)
    return g


def learn_graph(codes: np.ndarray, nodes: list[str], task: str, max_indegree: int = 3) -> nx.DiGraph:
    """A DAG over ``nodes`` learned from their codes (rows, nodes) by pgmpy's hill climbing on the
    BIC score, every edge out of the task forbidden (the task stays a sink)."""
    import warnings

    import pandas as pd

    with warnings.catch_warnings():  # pgmpy 1.1 warns about its own deprecations on import
        warnings.simplefilter("ignore")
        from pgmpy.causal_discovery import ExpertKnowledge
        from pgmpy.estimators import BIC, HillClimbSearch  # pgmpy's import is slow: only when used

        table = pd.DataFrame(codes.astype(str), columns=nodes)
        forbidden = ExpertKnowledge(forbidden_edges=[(task, n) for n in nodes if n != task])
        dag = HillClimbSearch(table).estimate(scoring_method=BIC(table), max_indegree=max_indegree,
                                               expert_knowledge=forbidden, show_progress=False)
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(dag.edges())
    return g

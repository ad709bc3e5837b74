"""Concept graphs for F-CMs: client subgraphs, perturbation, the server's aggregation, DiffPairs.

- ``client_subgraphs``: K subgraphs of the true DAG (Fenoglio et al., App. B): each holds the
  task's ancestor paths to the roots plus the ancestor paths of a few random non-root concepts;
  the task is removed from some clients; together they cover every node.
- ``perturb``: flip, remove or add a fraction p of a graph's edges, keeping it acyclic and the
  task a sink.
- ``aggregate`` (Sec. 4.2.1): for each unordered pair, the clients observing both nodes vote,
  weighted by their data size, among i->j, j->i and no edge; ties are broken by a seeded draw.
  Edges leaving the task are dropped, then cycles are removed by repeatedly deleting the
  weakest edge (lowest vote share) on a cycle. The log of removed edges is returned.
- ``diff_pairs``: pairs of nodes whose ancestor relation differs between two DAGs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


def aggregate(graphs: list[nx.DiGraph], sizes: list[float], task: str, seed: int = 0) -> Aggregated:
    """Weighted three-way vote per pair, task kept a sink, cycles broken at their weakest edge."""
    if len(graphs) != len(sizes):
        raise FedpgmError("aggregate needs one data size per client graph")
    for i, g in enumerate(graphs):
        check_client_graph(g, None, f"client {i}")
    rng = np.random.default_rng(seed)
    nodes = sorted(set().union(*(g.nodes() for g in graphs)))
    G = nx.DiGraph()
    G.add_nodes_from(nodes)
    weights = {}
    for a_i, a in enumerate(nodes):
        for b in nodes[a_i + 1:]:
            votes = np.zeros(3)  # a->b, b->a, none
            for g, w in zip(graphs, sizes):
                if a in g and b in g:
                    votes[0 if g.has_edge(a, b) else 1 if g.has_edge(b, a) else 2] += w
            if votes.sum() == 0:
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

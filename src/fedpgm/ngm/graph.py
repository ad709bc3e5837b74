"""Dependency graphs for NGMs: recovery from one client's mixed data, the server's merge, plots.

- ``association_matrix``: pairwise association of mixed features, in [0, 1] off the diagonal
  (|Pearson| for numeric pairs, the correlation ratio eta for numeric-categorical, bias-corrected
  Cramer's V for categorical pairs; pairwise complete rows).
- ``glasso_graph``: scikit-learn's graphical lasso on that matrix (shifted to be positive
  definite, as uGLAD's preprocessing does), edges = the ``sparsity`` fraction of pairs with the
  largest |partial correlation|.
- ``bn_graph``: a Bayesian network learned by pgmpy's hill climbing (BIC) on quantile-binned
  data, moralised, so each feature's neighbours are its Markov blanket.
- ``merge_graphs``: the FedNGM merge: nodes = features every client has, edges = the union of
  the clients' edges among them.

Graphs are ``networkx.Graph`` objects whose nodes are feature names; on the wire and on disk
they are edge lists (JSON).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
from sklearn.covariance import graphical_lasso

from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.ngm.layout import numeric

GRAPH_METHODS = ("glasso", "bn", "ngr")


def cramers_v(a: np.ndarray, b: np.ndarray) -> float:
    """Bias-corrected Cramer's V (Bergsma 2013) of two integer-coded columns."""
    table = pd.crosstab(a, b).to_numpy(dtype=float)
    n = table.sum()
    r, k = table.shape
    if r < 2 or k < 2:
        return 0.0
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / n
    chi2 = float(((table - expected) ** 2 / expected).sum())
    phi2 = max(0.0, chi2 / n - (k - 1) * (r - 1) / (n - 1))
    r_c, k_c = r - (r - 1) ** 2 / (n - 1), k - (k - 1) ** 2 / (n - 1)
    denom = min(k_c - 1, r_c - 1)
    return float(np.sqrt(phi2 / denom)) if denom > 0 else 0.0


def correlation_ratio(codes: np.ndarray, values: np.ndarray) -> float:
    """eta: the share of ``values``' spread explained by the categories ``codes``."""
    total = float(((values - values.mean()) ** 2).sum())
    if total <= 0:
        return 0.0
    _, inv, counts = np.unique(codes, return_inverse=True, return_counts=True)
    means = np.bincount(inv, weights=values) / counts
    between = float((counts * (means - values.mean()) ** 2).sum())
    return float(np.sqrt(between / total))


def association_matrix(frame: pd.DataFrame, schema: Schema) -> np.ndarray:
    """(F, F) association of every pair of ``schema``'s features, 1 on the diagonal."""
    names = schema.names
    F = len(names)
    A = np.eye(F)
    cols = {n: frame[n].to_numpy(dtype=float) for n in names}
    for i in range(F):
        for j in range(i + 1, F):
            a, b = cols[names[i]], cols[names[j]]
            ok = ~(np.isnan(a) | np.isnan(b))
            if ok.sum() < 3:
                continue
            a, b = a[ok], b[ok]
            fi, fj = schema.features[i], schema.features[j]
            if numeric(fi) and numeric(fj):
                sa, sb = a.std(), b.std()
                v = abs(float(np.corrcoef(a, b)[0, 1])) if sa > 0 and sb > 0 else 0.0
            elif numeric(fi):
                v = correlation_ratio(b, a)
            elif numeric(fj):
                v = correlation_ratio(a, b)
            else:
                v = cramers_v(a.astype(int), b.astype(int))
            A[i, j] = A[j, i] = v
    return A


def top_edges(names: list[str], strength: np.ndarray, sparsity: float) -> nx.Graph:
    """The graph on ``names`` with the ``sparsity`` fraction of pairs of largest |strength|."""
    if not 0.0 < sparsity <= 1.0:
        raise FedpgmError(f"sparsity {sparsity} must be in (0, 1]; it is the fraction of pairs kept")
    F = len(names)
    iu = np.triu_indices(F, k=1)
    values = np.abs(strength[iu])
    keep = int(round(sparsity * len(values)))
    order = np.argsort(-values, kind="stable")[:keep]
    G = nx.Graph()
    G.add_nodes_from(names)
    G.add_edges_from((names[iu[0][k]], names[iu[1][k]]) for k in order if values[k] > 0)
    return G


def glasso_graph(frame: pd.DataFrame, schema: Schema, sparsity: float = 0.25,
                 alpha: float = 0.01) -> nx.Graph:
    """Graphical lasso on the mixed association matrix; the strongest partial correlations."""
    S = association_matrix(frame, schema)
    low = float(np.linalg.eigvalsh(S).min())
    if low <= 1e-6:
        S = S + (0.1 - low) * np.eye(len(S))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, theta = graphical_lasso(S, alpha=alpha, max_iter=200)
    d = np.sqrt(np.diag(theta))
    partial = -theta / np.outer(d, d)
    return top_edges(schema.names, partial, sparsity)


def bn_graph(frame: pd.DataFrame, schema: Schema, bins: int = 5, max_indegree: int = 3) -> nx.Graph:
    """Moral graph of a Bayesian network learned by pgmpy (hill climbing, BIC) on binned data."""
    import warnings

    with warnings.catch_warnings():  # pgmpy 1.1 warns about its own deprecations on import
        warnings.simplefilter("ignore", FutureWarning)
        from pgmpy.estimators import BIC, HillClimbSearch  # pgmpy's import is slow: only when used

    data = {}
    for f in schema.features:
        v = frame[f.name]
        if f.kind == "continuous":
            v = pd.qcut(v, q=bins, labels=False, duplicates="drop")
        data[f.name] = v.astype("float").fillna(-1).astype(int).astype(str)
    table = pd.DataFrame(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dag = HillClimbSearch(table).estimate(scoring_method=BIC(table), max_indegree=max_indegree,
                                               show_progress=False)
    G = nx.Graph()
    G.add_nodes_from(schema.names)
    G.add_edges_from(dag.edges())
    for node in dag.nodes():
        parents = list(dag.predecessors(node))
        G.add_edges_from((p, q) for i, p in enumerate(parents) for q in parents[i + 1:])
    return G


def recover_graph(frame: pd.DataFrame, schema: Schema, method: str = "glasso",
                  sparsity: float = 0.25) -> nx.Graph:
    """A client's graph by ``method`` (``ngr`` starts from the complete graph: the NGR reveals it)."""
    if method == "glasso":
        return glasso_graph(frame, schema, sparsity)
    if method == "bn":
        return bn_graph(frame, schema)
    if method == "ngr":
        return nx.complete_graph(schema.names)
    raise FedpgmError(f"unknown graph method '{method}'; use one of {', '.join(GRAPH_METHODS)}")


def common_features(schemas: list[Schema]) -> list[str]:
    """Names every schema has, in the first schema's order; an error if there are none."""
    if not schemas:
        raise FedpgmError("no clients: a merge needs at least one client graph")
    shared = set(schemas[0].names).intersection(*(s.names for s in schemas[1:]))
    names = [n for n in schemas[0].names if n in shared]
    if not names:
        raise FedpgmError("the clients have no feature in common, so there is no shared graph; "
                          "give them common columns (same names) or federate them separately")
    return names


def merge_graphs(graphs: list[nx.Graph], nodes: list[str]) -> nx.Graph:
    """Nodes ``nodes``; an edge wherever any client graph has it between two of them."""
    G = nx.Graph()
    G.add_nodes_from(nodes)
    keep = set(nodes)
    for g in graphs:
        G.add_edges_from((a, b) for a, b in g.edges() if a in keep and b in keep and a != b)
    return G


def to_edges(G: nx.Graph) -> list[list[str]]:
    return sorted(sorted([str(a), str(b)]) for a, b in G.edges())


def from_edges(nodes: list[str], edges: list) -> nx.Graph:
    """The graph of an edge list; unknown nodes or self-loops are an error."""
    known = set(nodes)
    G = nx.Graph()
    G.add_nodes_from(nodes)
    for e in edges:
        if not isinstance(e, (list, tuple)) or len(e) != 2:
            raise FedpgmError(f"edge {e!r} is not a pair of feature names")
        a, b = e
        if a not in known or b not in known:
            raise FedpgmError(f"edge {a} - {b} names a feature that is not in {sorted(known)}")
        if a == b:
            raise FedpgmError(f"edge {a} - {b} is a self-loop; a feature cannot depend on itself")
        G.add_edge(a, b)
    return G


def adjacency(G: nx.Graph, names: list[str]) -> np.ndarray:
    """(F, F) 0/1 adjacency in ``names`` order, zero diagonal."""
    return nx.to_numpy_array(G, nodelist=names, weight=None).astype(np.float32)


def plot_graphs(graphs: dict[str, nx.Graph], path: str | Path, merged: str = "merged") -> Path:
    """One panel per graph, nodes placed the same way in every panel, labels outside the circle
    (PNG). In every panel, edges every client graph has (all panels but ``merged``) are drawn
    solid and edges only some clients have dashed and orange: where the clients disagree."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    clients = {k: g for k, g in graphs.items() if k != merged}
    union = nx.compose_all(list(graphs.values()))
    pos = nx.circular_layout(sorted(union.nodes()))
    votes = {frozenset(e): sum(g.has_edge(*e) for g in clients.values()) for e in union.edges()}
    fig, axes = plt.subplots(1, len(graphs), figsize=(5.2 * len(graphs), 5.6), squeeze=False)
    for ax, (title, G) in zip(axes[0], graphs.items()):
        shared = [e for e in G.edges() if votes.get(frozenset(e), 0) == len(clients)]
        some = [e for e in G.edges() if e not in shared]
        nodes = {n: pos[n] for n in G.nodes()}
        nx.draw_networkx_nodes(G, nodes, ax=ax, node_size=60, node_color="#4a6fa5")
        nx.draw_networkx_edges(G, nodes, edgelist=shared, ax=ax, edge_color="#334", width=1.0)
        nx.draw_networkx_edges(G, nodes, edgelist=some, ax=ax, edge_color="#e07b00", width=1.2, style="dashed")
        for n, (x, y) in nodes.items():  # labels outside the circle, aligned away from it
            ax.text(1.12 * x, 1.12 * y, n, fontsize=8, ha="left" if x > 0.05 else "right" if x < -0.05 else "center",
                    va="bottom" if y > 0.05 else "top" if y < -0.05 else "center")
        ax.set_title(f"{title}: {G.number_of_edges()} edges, {len(some)} not in every client graph", fontsize=10)
        ax.set_xlim(-1.7, 1.7)
        ax.set_ylim(-1.5, 1.5)
        ax.axis("off")
    fig.legend(handles=[Line2D([], [], color="#334", label=f"in every client's graph ({len(clients)})"),
                        Line2D([], [], color="#e07b00", ls="--", label="in some clients' graphs only")],
               loc="lower center", ncol=2, fontsize=9, frameon=False)
    fig.suptitle("Dependency graphs over the shared features: each client's and the merged graph", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

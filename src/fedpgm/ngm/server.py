"""FedNGM on the server: merge the client graphs, collect client NGMs, distil a global NGM from
their samples (optionally with public rows), release it only to a large enough federation.

``fit_fedngm(fed, ...)``:

1. ``describe``: each client's columns; the shared features are those every client holds.
2. ``graph``: each client's graph; the merged graph has the shared features as nodes and the
   union of the clients' edges among them. With ``secure_aggregation`` (Flower only) the server
   gets only the SecAgg+ sum of the clients' edge votes (``graph_votes``): how many clients hold
   each edge, not which, and no client graph; the union is the edges with at least one vote.
   The client models of step 3 still travel one by one: distillation samples from each.
3. ``fit``: each client trains an NGM on the shared features under the merged graph.
4. If fewer than ``min_clients`` clients contributed a model, the run refuses: no global
   model is trained or released, and the result says why.
5. The server draws samples from every client NGM (in proportion to the clients' rows, or
   equally; breadth-first draws refined by ``sweeps`` Gibbs sweeps), adds public rows if given,
   and trains the global NGM under the merged graph to match, on each synthetic row, the
   predictions of the client model that drew it (``soft``; or the sampled values): its size is
   that of one NGM whatever the number of clients.
6. ``release``: the global model goes to every client (the stitch step builds on it).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import networkx as nx
import numpy as np
import pandas as pd

from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.base import Federation
from fedpgm.ngm.client import model_message, model_of
from fedpgm.ngm.defaults import SAMPLES_FACTOR, SOFT_TARGETS
from fedpgm.ngm.graph import GRAPH_METHODS, common_features, from_edges, merge_graphs
from fedpgm.ngm.model import NGM, NGMSettings
from fedpgm.ngm.params import ALLOCATIONS



@dataclass
class FedNGMResult:
    """What a FedNGM run produced: the global model (None when refused) and how it got there."""

    global_model: NGM | None
    client_models: dict[str, NGM]
    client_graphs: dict[str, nx.Graph]
    merged: nx.Graph
    released: bool
    refusal: str | None = None
    info: dict = field(default_factory=dict)


def check_settings(n_clients: int, min_clients: int, graph_method: str, allocation: str) -> None:
    if min_clients < 1 or min_clients > n_clients:
        raise FedpgmError(f"--min-clients {min_clients} must be between 1 and the number of "
                          f"clients ({n_clients}); lower it or add clients")
    if graph_method not in GRAPH_METHODS:
        raise FedpgmError(f"unknown graph method '{graph_method}'; use one of {', '.join(GRAPH_METHODS)}")
    if allocation not in ALLOCATIONS:
        raise FedpgmError(f"unknown sample allocation '{allocation}'; use proportional or equal")


def fit_fedngm(fed: Federation, graph_method: str = "glasso", sparsity: float = 0.25,
               settings: NGMSettings | None = None, min_clients: int = 1, samples: int | None = None,
               allocation: str = "proportional", public: pd.DataFrame | None = None,
               seed: int = 0, sweeps: int = 0, soft: bool = SOFT_TARGETS,
               secure_aggregation: bool = False) -> FedNGMResult:
    """Steps 1-6 of the module doc. ``samples``: total synthetic rows (default: ``SAMPLES_FACTOR``
    times the clients' total rows); ``public``: extra rows of the shared features for the global model."""
    settings = settings or NGMSettings(seed=seed)
    check_settings(len(fed.clients), min_clients, graph_method, allocation)
    wall = time.perf_counter()
    described = fed.broadcast("describe").require(min_clients)  # (a client that fails is left out)
    schemas = {c: Schema.from_dict(m.config["schema"]).with_label(None) for c, m in described.items()}
    n_rows = {c: int(m.config["n_rows"]) for c, m in described.items()}
    shared = common_features(list(schemas.values()))
    first = next(iter(schemas.values()))
    for c, s in schemas.items():
        clash = [n for n in shared if s[n] != first[n]]
        if clash:
            raise FedpgmError(f"client '{c}' holds {clash} with other types or categories than "
                              "the other clients; make the schemas agree")

    graph_cfg = {"method": graph_method, "sparsity": sparsity}
    if secure_aggregation:
        merged, votes, voters = secure_merge(fed, list(described), shared, graph_cfg, min_clients)
        client_graphs, graph_info = {}, {"secure_aggregation": True, "edge_votes": votes}
    else:
        graphs = fed.broadcast("graph", config=graph_cfg, clients=list(described)).require(min_clients)
        client_graphs = {c: from_edges(schemas[c].names, m.config["edges"]) for c, m in graphs.items()}
        merged, voters = merge_graphs(list(client_graphs.values()), shared), list(graphs)
        graph_info = {"client_edges": {c: g.number_of_edges() for c, g in client_graphs.items()}}

    cfg = {"columns": shared, "edges": [list(e) for e in merged.edges()], "settings": asdict(settings)}
    replies = fed.broadcast("fit", config=cfg, clients=voters)
    client_models = {c: model_of(m, f"client '{c}' model") for c, m in replies.messages.items()}
    info = {"clients": fed.clients, "shared_features": shared, "n_rows": n_rows, **graph_info,
            "merged_edges": merged.number_of_edges(),
            "client_fit_seconds": {c: m.config["seconds"] for c, m in replies.messages.items()},
            "failed": {**{c: str(f) for c, f in fed.left_out.items()},
                       **{c: str(f) for c, f in replies.failures.items()}}}
    if len(client_models) < min_clients:
        refusal = (f"only {len(client_models)} client(s) contributed a model, fewer than the "
                   f"federation's threshold of {min_clients}: no global model is trained or released")
        fed.log(refusal)
        info.update(wall_seconds=time.perf_counter() - wall, **fed.ledger.totals())
        return FedNGMResult(None, client_models, client_graphs, merged, False, refusal, info)

    t0 = time.process_time()
    global_model, rows = distil(client_models, n_rows, merged, settings, samples, allocation, public, seed,
                                sweeps, soft)
    info.update(server_seconds=time.process_time() - t0, **rows)
    doc_msg = model_message("release", global_model)
    fed.broadcast("release", doc_msg.arrays, doc_msg.config, clients=list(client_models))
    info.update(wall_seconds=time.perf_counter() - wall, **fed.ledger.totals())
    return FedNGMResult(global_model, client_models, client_graphs, merged, True, None, info)


def secure_merge(fed: Federation, clients: list[str], shared: list[str], graph_cfg: dict,
                 min_clients: int) -> tuple[nx.Graph, dict[str, int], list[str]]:
    """The union of the client graphs over ``shared`` from a SecAgg+ sum of their 0/1 edge votes;
    also how many edges got each number of votes, and the clients whose votes were summed."""
    sums, replies = fed.secure_sum("graph_votes", ["votes"], {c: ({}, {**graph_cfg, "columns": shared})
                                                             for c in clients})
    if len(replies) < min_clients:
        raise FedpgmError(f"only {len(replies)} client(s) voted on the graph, fewer than {min_clients}")
    votes = np.rint(sums[0]).astype(int)  # (pairs,): SecAgg+'s quantization error is far below 0.5
    pairs = zip(*np.triu_indices(len(shared), 1))
    merged = nx.Graph()
    merged.add_nodes_from(shared)
    merged.add_edges_from((shared[i], shared[j]) for (i, j), v in zip(pairs, votes) if v >= 1)
    counts = np.bincount(votes, minlength=len(replies) + 1)
    return merged, {str(k): int(n) for k, n in enumerate(counts) if k > 0 and n}, sorted(replies)


def distil(models: dict[str, NGM], n_rows: dict[str, int], merged: nx.Graph, settings: NGMSettings,
           samples: int | None = None, allocation: str = "proportional",
           public: pd.DataFrame | None = None, seed: int = 0, sweeps: int = 0,
           soft: bool = SOFT_TARGETS) -> tuple[NGM, dict]:
    """The global NGM trained on samples of the client ``models`` (plus ``public`` rows) under
    the ``merged`` graph, and the row counts it saw. ``soft``: on each synthetic row its fit
    targets are the predictions of the client model that drew the row, for the same inputs
    (distillation of the clients' mixture), rather than the sampled values themselves;
    public rows keep their values."""
    schema = next(iter(models.values())).schema
    synthetic, drawn_by = draw_samples(models, {c: n_rows[c] for c in models}, samples, allocation, seed, sweeps)
    table = synthetic if public is None else pd.concat([synthetic, public[schema.names]], ignore_index=True)
    teachers = [models[c] for c in sorted(models)] if soft else None
    teacher_of = np.concatenate([drawn_by, np.full(len(table) - len(synthetic), -1)])
    return NGM.fit(table, schema, merged, settings, teachers=teachers, teacher_of=teacher_of), {
        "synthetic_rows": len(synthetic), "public_rows": 0 if public is None else len(public)}


def draw_samples(models: dict[str, NGM], n_rows: dict[str, int], total: int | None,
                 allocation: str, seed: int, sweeps: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """Samples from each client model: ``total`` rows split in proportion to ``n_rows`` or
    equally, and (rows,) the index of the model (in sorted client order) that drew each row."""
    clients = sorted(models)
    total = total or int(SAMPLES_FACTOR * sum(n_rows.values()))
    if allocation == "equal":
        weights = np.ones(len(clients))
    else:
        weights = np.array([n_rows[c] for c in clients], dtype=float)
    counts = np.floor(total * weights / weights.sum()).astype(int)
    counts[: total - counts.sum()] += 1
    parts = [models[c].sample(int(k), seed=seed + i, sweeps=sweeps)
             for i, (c, k) in enumerate(zip(clients, counts)) if k > 0]
    return pd.concat(parts, ignore_index=True), np.repeat(np.arange(len(clients)), counts)

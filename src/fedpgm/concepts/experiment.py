"""One F-CM run: concept data, clients, a regime, metrics (the CLI's ``concepts fit``).

Clients: K subgraphs of the true DAG. The first half (the initial pool) is drawn from the
network with a random 30% of its concepts held back, so the clients joining at ``join_round``
bring concepts and edges unseen before; together the late clients cover every node. A fraction
``r`` of clients gets its graph perturbed on a fraction ``p`` of edges. The training rows are
split into K disjoint parts; each keeps labels only for its subgraph's nodes.

On a user's table (``FCMSettings.client_concepts``, ``fedpgm.concepts.data.table_concept_data``)
the clients are the manifest's: each observes its listed concepts and the task, learns its
concept graph from its own rows, and the first half of the manifest starts while the rest join
at ``join_round``; the training rows are split among them as above.

Late clients from a shifted distribution (``late_shift`` = s > 0; the paper's late clients may
bring "data from new distributions"): the late clients' rows are drawn from the training rows
with weights prod_r q_r(x_r) / p_r(x_r) over the network's root nodes r (the task excluded),
where p_r is a root's empirical marginal and q_r = (1 - s) p_r + s d_r with d_r a seeded
Dirichlet(1) draw. Reweighting by root values only is exactly sampling the same network with
other root priors: every other conditional distribution, hence the true DAG, is unchanged. The
initial clients' rows are drawn uniformly from the rest; validation and test rows are not
shifted.

``PAPER_PROTOCOL`` (one place; ``benchmarks/fcm_table1.py --protocol paper`` reads it): the
server steps as published: per-round graph aggregation over the sampled clients, votes as the
paper's experiments send them (binary adjacency), the centralized baseline on the true DAG, and
late clients from a shifted distribution.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd

from fedpgm.concepts.data import ConceptData, make_concept_data
from fedpgm.concepts.federation import (GRAPH, X_PREFIX, RoundSettings, run_rounds,
                                        split_table, train_alone)
from fedpgm.concepts.graphs import (aggregate, client_subgraphs, diff_pairs, from_edge_list, learn_graph, perturb,
                                   to_edge_list)
from fedpgm.concepts.models import ConceptModel, load_model, save_model
from fedpgm.concepts.train import TrainSettings, depths, evaluate
from fedpgm.data.partition import ClientData, Partition
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.base import DEFAULT_TIMEOUT_S
from fedpgm.federation.lifecycle import private_tempdir
from fedpgm.federation.privacy import PrivacyAudit
from fedpgm.federation.runner import run


@dataclass
class FCMSettings:
    """One concept-model experiment: the Bayesian network and task, the federation (clients,
    held-back share, perturbed clients and edges), the backend and the rounds' settings."""
    network: str = "asia"
    task: str | None = None
    rows: int | None = None
    clients: int = 20
    held_back: float = 0.3
    perturbed_clients: float = 0.0  # r
    perturbed_edges: float = 0.0  # p
    backend: str = "inprocess"  # "flower": a loopback deployment, one SuperNode per client; "simulation"
    centralized_graph: str = "aggregated"  # "true": the centralized baseline on the network's DAG (the paper)
    late_shift: float = 0.0  # s in [0, 1]: late clients' rows from shifted root priors (module doc)
    client_concepts: dict[str, list[str]] | None = None  # a user's table: each client's concept columns
    rounds: RoundSettings = field(default_factory=RoundSettings)
    timeout: float = DEFAULT_TIMEOUT_S  # seconds per exchange with the clients

    def check(self) -> "FCMSettings":
        """``self`` when every setting holds, else a one-line ``FedpgmError``; run before any data
        is drawn or read and before any worker starts."""
        self.rounds.check(self.backend)
        if self.centralized_graph not in CENTRALIZED_GRAPHS:
            raise FedpgmError(f"centralized_graph must be one of {CENTRALIZED_GRAPHS}, got '{self.centralized_graph}'")
        if self.rounds.per_round > self.clients:
            raise FedpgmError(f"--per-round {self.rounds.per_round} exceeds --clients {self.clients}; lower it")
        return self


# The paper's server steps and data (Fenoglio et al., Sec. 4.2.1, Alg. 1, App. B/D); LATE_SHIFT is
# this project's choice of how strong "a new distribution" is (the paper gives no number).
LATE_SHIFT = 0.5
PAPER_PROTOCOL: dict[str, Any] = {"rounds": {"graph_rounds": "round", "graph_votes": "adjacency"},
                  "centralized_graph": "true", "late_shift": LATE_SHIFT}
CENTRALIZED_GRAPHS = ("aggregated", "true")
PROTOCOLS = ("project", "paper")


def paper_protocol(s: FCMSettings) -> FCMSettings:
    """``s`` with the paper's protocol (``PAPER_PROTOCOL``)."""
    top = {k: v for k, v in PAPER_PROTOCOL.items() if k != "rounds"}
    return replace(s, rounds=replace(s.rounds, **PAPER_PROTOCOL["rounds"]), **top)


def shift_weights(d: ConceptData, rows: np.ndarray, shift: float, rng: np.random.Generator) -> np.ndarray:
    """(len(rows),) sampling weights that move each root node's marginal towards a Dirichlet(1)
    draw by ``shift`` (module doc); all ones for shift 0."""
    w = np.ones(len(rows))
    for root in [n for n in d.nodes if n != d.task and d.dag.in_degree(n) == 0]:
        codes = d.codes[rows, d.nodes.index(root)]
        p = np.bincount(codes, minlength=d.cards[root]) / len(codes)
        q = (1 - shift) * p + shift * rng.dirichlet(np.ones(d.cards[root]))
        w *= q[codes] / p[codes]
    return w


def perturb_some(graphs: list[nx.DiGraph], s: FCMSettings, rng: np.random.Generator, task: str) -> list[nx.DiGraph]:
    """Each graph perturbed (a fraction ``perturbed_edges`` of its edges) with probability ``perturbed_clients``."""
    perturbed = rng.random(len(graphs)) < s.perturbed_clients
    return [perturb(g, s.perturbed_edges, rng, task) if p else g for g, p in zip(graphs, perturbed)]


def make_clients(d: ConceptData, s: FCMSettings) -> tuple[list[ClientData], list[str], list[str]]:
    """(clients, initial ids, late ids). With ``client_concepts`` (a user's table) the clients are
    the manifest's, in its order, and each learns its graph over its concepts and the task from
    its own rows (``learn_graph``); otherwise they are subgraphs of the network (module doc)."""
    rng = np.random.default_rng(s.rounds.seed)
    k = s.clients
    if k < 2:
        raise FedpgmError(f"--clients {k}: F-CMs need at least 2 clients (an initial and a late one)")
    manifest = s.client_concepts
    if manifest is not None and len(manifest) != k:
        raise FedpgmError(f"--clients {k} differs from the {len(manifest)} clients of --client-concepts; "
                          "leave --clients out")
    k0 = k // 2
    if manifest is None:
        concepts = d.concepts
        held = set(rng.choice(concepts, size=int(round(s.held_back * len(concepts))), replace=False).tolist())
        first = client_subgraphs(d.dag.subgraph(set(d.nodes) - held).copy(), d.task, k0, rng)
        rest = client_subgraphs(d.dag, d.task, k - k0, rng)
        graphs = perturb_some(first + rest, s, rng, d.task)
    if not 0.0 <= s.late_shift <= 1.0:
        raise FedpgmError(f"late_shift must lie in [0, 1], got {s.late_shift}")
    train = d.part(0)
    if s.late_shift > 0:  # late rows drawn with shifted root priors, initial rows uniformly from the rest
        w = shift_weights(d, train, s.late_shift, rng)
        size = len(train) // k
        late_rows = rng.choice(train, size=(k - k0) * size, replace=False, p=w / w.sum())
        early_rows = rng.permutation(np.setdiff1d(train, late_rows))[: k0 * size]
        parts = np.array_split(early_rows, k0) + np.array_split(late_rows, k - k0)
    else:
        parts = np.array_split(rng.permutation(train), k)
    if manifest is not None:
        graphs = []
        for observed, rows in zip(manifest.values(), parts):
            nodes = [n for n in d.nodes if n in observed or n == d.task]
            graphs.append(learn_graph(d.codes[rows][:, [d.nodes.index(n) for n in nodes]], nodes, d.task))
        graphs = perturb_some(graphs, s, rng, d.task)
    names = list(manifest) if manifest is not None else [f"client-{i}" for i in range(k)]
    feats = [Feature(f"{X_PREFIX}{j}", "continuous") for j in range(d.x.shape[1])]
    clients = []
    for name, g, rows in zip(names, graphs, parts):
        nodes = [n for n in d.nodes if n in g]
        schema = Schema(tuple(feats) + tuple(Feature(n, "binary" if d.cards[n] == 2 else "categorical",
                                                     d.states[n]) for n in nodes))
        table = pd.DataFrame(d.x[np.sort(rows)], columns=[f.name for f in feats])
        for n in nodes:
            table[n] = d.codes[np.sort(rows), d.nodes.index(n)].astype(float)
        table.index = pd.Index(np.sort(rows), name="row_id")
        clients.append(ClientData(name, schema, table, meta={GRAPH: to_edge_list(g)}))
    ids = [c.client_id for c in clients]
    return clients, ids[:k0], ids[k0:]


def rows_of(d: ConceptData, which: int) -> pd.DataFrame:
    """Split ``which`` (1 validation, 2 test) of ``d`` as a table: input columns, every node's code."""
    idx = d.part(which)
    table = pd.DataFrame(d.x[idx], columns=[f"{X_PREFIX}{j}" for j in range(d.x.shape[1])], index=idx)
    for j, n in enumerate(d.nodes):
        table[n] = d.codes[idx, j].astype(float)
    return table


def federation_of(d: ConceptData, s: FCMSettings) -> tuple[Partition, list[str], pd.DataFrame, pd.DataFrame]:
    """The clients ``run_fcm`` makes, as what ``FederatedCM.fit`` takes: (partition, late client
    ids, validation rows, test rows)."""
    clients, _, late = make_clients(d, s)
    full = Schema(tuple({f.name: f for c in clients for f in c.schema.features}.values()), d.task)
    return Partition("hybrid", full, clients, dataset=d.dataset), late, rows_of(d, 1), rows_of(d, 2)


def test_metrics(model: ConceptModel, d: ConceptData) -> dict:
    te = d.part(2)
    out = evaluate(model, d.x[te], d.codes[te], d.nodes, d.task, d.cards, d.dag)
    depth = depths(d.dag)
    out["intervention_accuracy"] = []
    for level in range(0, max(depth.values())):
        m = evaluate(model, d.x[te], d.codes[te], d.nodes, d.task, d.cards, d.dag, intervene_depth=level)
        out["intervention_accuracy"].append({"depth": level, "task_accuracy": m["task_accuracy"],
                                             "label_accuracy": m["label_accuracy"]})
    return out


def run_fcm(s: FCMSettings, data: ConceptData | None = None, progress=None) -> tuple[ConceptModel, dict]:
    """One network x model x regime run; returns (model, report)."""
    s.check()
    r = s.rounds
    t0 = time.perf_counter()
    d = data or make_concept_data(s.network, s.task, s.rows, r.seed)
    clients, initial, late = make_clients(d, s)
    va = d.part(1)
    val = (d.x[va], d.codes[va, d.nodes.index(d.task)])
    report: dict[str, Any] = {"network": s.network, "task": d.task, "model": r.kind, "regime": r.regime, "seed": r.seed,
              "clients": s.clients, "per_round": r.per_round, "join_round": r.join_round,
              "lr": r.train.lr}
    all_graphs = [from_edge_list(c.meta[GRAPH]) for c in clients]
    sizes = [len(c.train) for c in clients]
    if r.regime in ("static", "fcm", "reinit"):
        audit = PrivacyAudit.beside_policies(clients)
        out = run_federated(clients, initial, late, d.cards, d.task, int(d.x.shape[1]), val, r, s.timeout,
                            s.backend, d.dataset, audit, progress)
        report["privacy_audit_messages"] = audit.checked  # (in-process; a Flower client audits its own)
        comm = out["communication"]
        report.update(backend=s.backend, bytes_up=comm["bytes_up"], bytes_down=comm["bytes_down"],
                      bytes_by_message=comm["bytes_by_message"], secure_aggregation=r.secure_aggregation,
                      connected_at_start=out["connected_at_start"])
        model = out["model"]
        report.update(rounds=len(out["history"]), val_task_loss=[h["val_task_loss"] for h in out["history"]],
                      joins=out["joins"], removed_edges=out["removed_edges"], graph_changes=out["graph_changes"],
                      fraction_params_changed=sum(j["fraction_params_changed"] for j in out["joins"]))
        if r.dp_epsilon is not None:
            report.update(dp={"target_epsilon": r.dp_epsilon, "scope": r.dp_scope, "delta": r.dp_delta,
                              "max_grad_norm": 1.0,
                              "epsilon_spent_max": max(out["epsilon_spent"].values(), default=0.0),
                              "epsilon_per_update_max": max(out["epsilon_per_update"].values(), default=0.0),
                              "epsilon_spent": out["epsilon_spent"]})
        report.update(test_metrics(model, d))
        report["diff_pairs"] = diff_pairs(d.dag, model.graph)
    elif r.regime == "centralized":
        pooled = pd.concat([c.train for c in clients]).sort_index()
        x, codes, nodes = split_table(pooled)
        graph = d.dag if s.centralized_graph == "true" else aggregate(all_graphs, sizes, d.task, r.seed).graph
        model = ConceptModel(r.kind, d.x.shape[1], d.cards, graph, d.task, r.hidden, r.emb, r.seed)
        history = train_alone(model, x, codes, nodes, val, r)
        report.update(rounds=len(history), val_task_loss=[h["val_task_loss"] for h in history],
                      fraction_params_changed=0.0, bytes_up=0, bytes_down=0)
        report.update(test_metrics(model, d))
        report["diff_pairs"] = diff_pairs(d.dag, model.graph)
    else:  # local: one model per client, metrics averaged over clients
        per = []
        for c, g in zip(clients, all_graphs):
            x, codes, nodes = split_table(c.train)
            model = ConceptModel(r.kind, d.x.shape[1], d.cards, g, d.task, r.hidden, r.emb, r.seed)
            history = train_alone(model, x, codes, nodes, val, r)
            per.append(test_metrics(model, d) | {"rounds": len(history),
                                                 "best_val_task_loss": min(h["val_task_loss"] for h in history)})
        report.update({k: float(np.mean([p[k] for p in per]))
                       for k in ("task_accuracy", "concept_accuracy", "label_accuracy", "coverage",
                                 "best_val_task_loss")})
        report["intervention_accuracy"] = [
            {"depth": level["depth"], **{k: float(np.mean([p["intervention_accuracy"][i][k] for p in per]))
                                        for k in ("task_accuracy", "label_accuracy")}}
            for i, level in enumerate(per[0]["intervention_accuracy"])]
        report.update(rounds=int(np.mean([p["rounds"] for p in per])), fraction_params_changed=0.0,
                      bytes_up=0, bytes_down=0, val_task_loss=[])
        report["per_client"] = per
    if r.regime != "local":
        report["best_val_task_loss"] = min(report["val_task_loss"])
    report["seconds"] = time.perf_counter() - t0
    return model, report


def run_fcm_tuned(s: FCMSettings, lrs: list[float], data: ConceptData | None = None,
                  progress=None) -> tuple[ConceptModel, dict]:
    """``run_fcm`` once per Adam learning rate in ``lrs``; keeps the run with the lowest best
    validation task loss (the paper tunes the learning rate per dataset and model on validation
    data; the test set never chooses). The report lists every candidate's loss and seconds."""
    if not lrs:
        raise FedpgmError("give at least one learning rate to try")
    bad = [lr for lr in lrs if not lr > 0]
    if bad:  # before any data is sampled or any candidate trained
        raise FedpgmError(f"--lrs {bad}: every learning rate must be positive (e.g. 1e-3)")
    d = data or make_concept_data(s.network, s.task, s.rows, s.rounds.seed)
    best: tuple[ConceptModel, dict] | None = None
    candidates = []
    for lr in lrs:  # only the best model so far is kept in memory
        model, report = run_fcm(replace(s, rounds=replace(s.rounds, train=replace(s.rounds.train, lr=lr))), d, progress)
        candidates.append({k: report[k] for k in ("lr", "best_val_task_loss", "seconds")})
        if best is None or report["best_val_task_loss"] < best[1]["best_val_task_loss"]:
            best = (model, report)
    assert best is not None  # (at least one learning rate was tried)
    best[1]["lr_candidates"] = candidates
    return best


def run_federated(clients: list[ClientData], initial: list[str], late: list[str], cards: dict[str, int], task: str,
                  input_dim: int, val: tuple[np.ndarray, np.ndarray], r: RoundSettings,
                  timeout: float = DEFAULT_TIMEOUT_S, backend: str = "inprocess", dataset: str = "",
                  audit=None, progress=None) -> dict:
    """The federated rounds (``server_procedure``) on ``backend``: each client holds only its rows
    and its concept graph (``ClientData.meta``); the ``late`` clients join at the join round (on
    Flower their SuperNodes start when the server waits for them). Returns the procedure's
    result with the trained ``model``. One worker process per client, one thread each (as
    FedPC's): an asia F-CM run of 30 rounds beside another job took 106 s with the clients in
    this process, 22 s so (the same numbers: a client's training is deterministic on one thread)."""
    full = Schema(tuple({f.name: f for c in clients for f in c.schema.features}.values()))
    with private_tempdir("fedpgm-fcm-") as tmp:
        np.savez(tmp / "val.npz", x=val[0], y=val[1])
        args = {"initial": initial, "late": late, "cards": cards, "task": task, "input_dim": input_dim,
                "val": str(tmp / "val.npz"), "settings": asdict(r), "out": str(tmp / "model")}
        result = run(Partition("hybrid", full, clients, dataset=dataset), "concepts", "concepts", args,
                     backend=backend, timeout=timeout, late=late, audit=audit, progress=progress)
        model, _ = load_model(tmp / "model")
    return {**result, "model": model}


def server_procedure(fed, initial: list[str], late: list[str], cards: dict, task: str, input_dim: int,
                     val: str, settings: dict, out: str, progress=None) -> dict:
    """The server's side on every backend (``fedpgm.federation.runner``): ``run_rounds``, the
    model saved to ``out``."""
    s = RoundSettings(**{**settings, "train": TrainSettings(**settings["train"])})
    with np.load(val, allow_pickle=False) as z:
        v = (z["x"], z["y"])
    connected = list(fed.clients)  # before the join round (on Flower the late clients are not there yet)
    res = run_rounds(fed, initial, late, cards, task, input_dim, v, s, progress)
    save_model(res["model"], out)
    return {"connected_at_start": connected, "history": res["history"], "joins": res["joins"],
            "graph_changes": res["graph_changes"], "left_out": res["left_out"],
            "removed_edges": res["removed_edges"],
            "epsilon_spent": res["epsilon_spent"], "epsilon_per_update": res["epsilon_per_update"]}

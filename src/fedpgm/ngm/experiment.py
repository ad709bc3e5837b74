"""The FedNGM experiment of the paper: public and private halves, skewed clients, every model
on every test set, stitching.

``build_federation(dataset, seed, ...)`` splits the complete rows of a table in half by seed
(stratified on the label): a public half, itself halved into public-train (optional extra rows
for the global model) and public-test (evaluation only), and a private pool from which each
client draws its rows without replacement, rows of its skew group weighted ``alpha`` times the
rest; each client keeps 80% for training and 20% for its test set. A client holds the shared
features plus its withheld one (the feature stitching adds back).

``run_ngm(settings)`` runs FedNGM through the runtime on any backend (privacy audit on), trains the
global NGM on samples only and on samples plus public-train, a centralized NGM on the pooled client rows,
stitches each client, and reports each model's metrics on each client's test set and on
public-test for the targets, with the paper's comparisons and wall times. Only the clients
that hold a withheld feature stitch; with nothing withheld the report has no stitching.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedpgm.data import ClientData, Partition, load_dataset
from fedpgm.data.dataset import Dataset
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.base import DEFAULT_TIMEOUT_S
from fedpgm.federation.lifecycle import private_tempdir
from fedpgm.federation.privacy import PrivacyAudit
from fedpgm.federation.runner import run
from fedpgm.ngm.defaults import SAMPLES_FACTOR, SOFT_TARGETS
from fedpgm.ngm.graph import from_edges, plot_graphs
from fedpgm.ngm.metrics import target_metrics
from fedpgm.ngm.model import NGM, NGMSettings
from fedpgm.ngm.server import check_settings, distil, fit_fedngm

SKEW = re.compile(r"^(?P<col>[^=!<>]+?)\s*(?P<op>==|=|!=|>=|<=|>|<)\s*(?P<value>.+)$")
ADULT_DEFAULTS = {"skew": ["sex=Female", "race!=White", "age>=50"],
                  "withhold": ["capital-gain", "capital-loss", "hours-per-week"],
                  "targets": ["age", "income", "marital-status"]}


@dataclass
class ExperimentSettings:
    """One FedNGM experiment: dataset, clients and their skews and withheld features, targets,
    public share, graph recovery, quorum, samples and Gibbs sweeps, and the NGM settings."""
    dataset: str = "adult"
    clients: int = 3
    skew: list[str] = field(default_factory=lambda: list(ADULT_DEFAULTS["skew"]))
    withhold: list[str] = field(default_factory=lambda: list(ADULT_DEFAULTS["withhold"]))
    targets: list[str] = field(default_factory=lambda: list(ADULT_DEFAULTS["targets"]))
    alpha: float = 5.0
    public_fraction: float = 0.5
    rows_per_client: int | None = None
    graph: str = "glasso"
    sparsity: float = 0.25
    min_clients: int = 1
    allocation: str = "proportional"
    samples_factor: float = SAMPLES_FACTOR  # synthetic rows = factor x the clients' training rows
    gibbs_sweeps: int = 0
    soft_targets: bool = SOFT_TARGETS
    ngm: NGMSettings = field(default_factory=NGMSettings)
    seed: int = 0
    data_dir: str | None = None
    label: str | None = None  # csv: (and bn:) load options, as ``fedpc fit`` takes them
    schema: str | None = None
    missing: str | None = None
    keep: list[str] = field(default_factory=list)
    timeout: float = DEFAULT_TIMEOUT_S  # seconds per exchange with the clients
    backend: str = "inprocess"  # where the federation runs (``fedpgm.federation.runner``)


    def estimator(self):
        """The ``FederatedNGM`` of these settings, whose ``check_params`` checks them."""
        from fedpgm.ngm.estimator import FederatedNGM

        n = self.ngm
        return FederatedNGM(graph=self.graph, sparsity=self.sparsity, min_clients=self.min_clients,
                            allocation=self.allocation, gibbs_sweeps=self.gibbs_sweeps, soft=self.soft_targets,
                            hidden=n.hidden, layers=n.layers, lam=n.lam, lr=n.lr, epochs=n.epochs,
                            batch_size=n.batch_size, patience=n.patience, backend=self.backend,
                            timeout=self.timeout, seed=self.seed)


def skew_mask(frame: pd.DataFrame, ds: Dataset, spec: str) -> np.ndarray:
    """Rows in a skew group: ``COLUMN`` (its rarest category / top quartile), ``COLUMN=CAT``,
    ``COLUMN!=CAT`` or a numeric comparison ``COLUMN>=NUMBER`` (also >, <, <=)."""
    m = SKEW.match(spec)
    col = (m.group("col") if m else spec).strip()
    if col not in ds.schema:
        raise FedpgmError(f"--skew '{spec}' names no column of {ds.name}; columns are {ds.schema.names}")
    f, v = ds.schema[col], frame[col].to_numpy(dtype=float)
    if m is None:
        if f.discrete:
            return v == frame[col].value_counts().idxmin()
        return v >= np.quantile(v, 0.75)
    op, value = m.group("op"), m.group("value").strip()
    if f.discrete and op in ("=", "==", "!="):
        if value not in f.states:
            raise FedpgmError(f"--skew '{spec}': '{value}' is not a category of {col} {list(f.states)}")
        hit = v == f.states.index(value)
        return ~hit if op == "!=" else hit
    try:
        x = float(value)
    except ValueError:
        raise FedpgmError(f"--skew '{spec}': '{value}' is not a number; use =/!= with a category") from None
    return {"=": v == x, "==": v == x, "!=": v != x, ">=": v >= x, "<=": v <= x, ">": v > x, "<": v < x}[op]


def build_federation(s: ExperimentSettings) -> tuple[Dataset, pd.DataFrame, pd.DataFrame, list[ClientData], list[str]]:
    """(dataset, public_train, public_test, clients, shared features); see the module doc."""
    options = {"data_dir": s.data_dir, "label": s.label, "schema": s.schema, "missing": s.missing}
    ds = load_dataset(s.dataset, seed=s.seed, keep=s.keep, **{k: v for k, v in options.items() if v is not None})
    if s.clients < 1:
        raise FedpgmError(f"--clients {s.clients} must be >= 1")
    if not 0 < s.public_fraction < 1:
        raise FedpgmError(f"--public-fraction {s.public_fraction} must be in (0, 1)")
    if len(s.skew) not in (0, s.clients):
        raise FedpgmError(f"give one --skew per client ({s.clients}) or none, not {len(s.skew)}")
    ds.schema.check_names(s.withhold + s.targets)
    if set(s.withhold) & set(s.targets):
        raise FedpgmError(f"a withheld feature cannot be a target: {sorted(set(s.withhold) & set(s.targets))}")
    rng = np.random.default_rng(s.seed)
    frame = pd.concat([ds.train, ds.test]).dropna()
    label = ds.schema.label
    strata = frame[label].to_numpy() if label else np.zeros(len(frame))
    public_rows = []
    for value in np.unique(strata):  # stratified halves
        idx = np.flatnonzero(strata == value)
        public_rows += list(rng.choice(idx, int(round(s.public_fraction * len(idx))), replace=False))
    is_public = np.zeros(len(frame), bool)
    is_public[public_rows] = True
    public, pool = frame[is_public], frame[~is_public]
    half = rng.permutation(len(public))
    cut = len(half) // 2
    public_train, public_test = public.iloc[np.sort(half[:cut])], public.iloc[np.sort(half[cut:])]
    shared = [n for n in ds.schema.names if n not in s.withhold]
    size = s.rows_per_client or len(pool) // s.clients
    if size * s.clients > len(pool):
        raise FedpgmError(f"{s.clients} clients x {size} rows exceed the private pool of {len(pool)} rows")
    left = np.ones(len(pool), bool)
    clients = []
    for k in range(s.clients):
        weights = np.where(skew_mask(pool, ds, s.skew[k]), s.alpha, 1.0) if s.skew else np.ones(len(pool))
        weights = weights * left
        rows = rng.choice(len(pool), size, replace=False, p=weights / weights.sum())
        left[rows] = False
        cols = shared + ([s.withhold[k]] if k < len(s.withhold) else [])
        part = pool.iloc[np.sort(rows)][cols]
        test_idx = rng.permutation(len(part))[: len(part) // 5]
        is_test = np.zeros(len(part), bool)
        is_test[test_idx] = True
        schema = ds.schema.with_label(None).select(cols)
        clients.append(ClientData(f"client-{k}", schema, part[~is_test], part[is_test]))
    return ds, public_train, public_test, clients, shared


def grid(models: dict[str, NGM], tests: dict[str, pd.DataFrame], targets: list[str]) -> dict:
    """metrics[model][test set][target]."""
    return {m: {t: {y: target_metrics(model, frame, y) for y in targets} for t, frame in tests.items()}
            for m, model in models.items()}


def primary(metrics: dict) -> float:
    return metrics[metrics["primary"]]


def better_or_close(value: float, reference: float, higher: bool, tol: float) -> bool:
    """``value`` better than ``reference`` or within ``tol`` of it (relative)."""
    gap = (reference - value) if higher else (value - reference)
    return gap <= tol * abs(reference)


def comparisons(metrics: dict, clients: list[str], stitched: dict, targets: list[str]) -> dict:
    """The paper's claims, checked: global vs mean client on public-test, global vs each client's
    own model on its test set (5%), stitched vs global on each client's test set."""
    out: dict[str, dict] = {"global_beats_mean_client_on_public": {}, "global_within_5pct_of_own": {},
                            "stitching_improves": {}}
    for y in targets:
        g = metrics["global"]["public-test"][y]
        mean_client = float(np.mean([primary(metrics[c]["public-test"][y]) for c in clients]))
        higher = g["higher_is_better"]
        out["global_beats_mean_client_on_public"][y] = {
            "global": primary(g), "mean_client": mean_client, "metric": g["primary"],
            "holds": bool(primary(g) > mean_client if higher else primary(g) < mean_client)}
        for c in clients:
            own, glob = primary(metrics[c][c][y]), primary(metrics["global"][c][y])
            out["global_within_5pct_of_own"].setdefault(c, {})[y] = {
                "global": glob, "own": own, "holds": better_or_close(glob, own, higher, 0.05)}
            if c in stitched and y in stitched[c]:
                st, gl = stitched[c][y]["stitched"], stitched[c][y]["global"]
                out["stitching_improves"].setdefault(c, {})[y] = {
                    "stitched": primary(st), "global": primary(gl),
                    "holds": bool(primary(st) > primary(gl) if higher else primary(st) < primary(gl))}
    return out


def run_ngm(s: ExperimentSettings, out: str | Path | None = None, plot_dir: str | Path | None = None,
            mode: str = "processes", progress=None) -> tuple[NGM | None, dict]:
    """The whole experiment; returns (global model, report). ``out`` saves the global model."""
    say = progress or (lambda text: None)
    t0 = time.perf_counter()
    check_settings(s.clients, s.min_clients, s.graph, s.allocation)  # (before any data is read)
    s.estimator().check_params()
    ds, public_train, public_test, clients, shared = build_federation(s)
    settings = NGMSettings.from_dict({**s.ngm.__dict__, "seed": s.seed})
    for y in s.targets:
        if y not in shared:
            raise FedpgmError(f"target '{y}' is not a shared feature; shared features are {shared}")
    times = {"split": time.perf_counter() - t0}
    audit = PrivacyAudit.beside_policies(clients)
    samples = int(s.samples_factor * sum(len(c.train) for c in clients))
    holders = [c.client_id for c in clients[:len(s.withhold)]]  # client k holds withheld feature k
    fit = {"graph_method": s.graph, "sparsity": s.sparsity, "min_clients": s.min_clients, "samples": samples,
           "allocation": s.allocation, "seed": s.seed, "sweeps": s.gibbs_sweeps, "soft": s.soft_targets,
           "ngm": asdict(settings)}
    say(f"clients: graphs, local NGMs; server: merge, sample, distil{'; stitching' if holders else ''} "
        f"({s.backend})")
    full = Schema(tuple({f.name: f for c in clients for f in c.schema.features}.values()))
    with private_tempdir("fedpgm-ngm-") as tmp:
        t = time.perf_counter()
        # stitching adds a withheld feature back: none withheld, nothing to stitch
        args = {"settings": fit, "out": str(tmp / "global"), "clients_out": str(tmp / "clients"),
                "stitch": {"clients": holders, "targets": s.targets} if holders else None}
        result = run(Partition("hybrid", full, clients, dataset=ds.name), "ngm", "ngm", args, backend=s.backend,
                     timeout=s.timeout, mode=mode, audit=audit)
        times["fedngm"] = time.perf_counter() - t - result.get("stitch_seconds", 0.0)
        if "stitch_seconds" in result:
            times["stitch"] = result["stitch_seconds"]
        report = {"dataset": ds.name, "seed": s.seed, "backend": s.backend, "clients": [c.client_id for c in clients],
                  "shared_features": shared, "withheld": dict(zip([c.client_id for c in clients], s.withhold)),
                  "skew": dict(zip([c.client_id for c in clients], s.skew)),
                  "rows": {c.client_id: {"train": len(c.train), "test": 0 if c.test is None else len(c.test)}
                           for c in clients}
                  | {"public-train": len(public_train), "public-test": len(public_test)},
                  "released": result["released"], "refusal": result["refusal"], "fedngm": result["info"],
                  "graph": s.graph, "ngm_settings": settings.__dict__,
                  "privacy_audit_messages": audit.checked,  # (in-process; a Flower client audits its own)
                  "bytes_up": result["communication"]["bytes_up"],
                  "bytes_down": result["communication"]["bytes_down"]}
        if not result["released"]:
            report["wall_seconds"] = times
            return None, report
        global_model = NGM.load(tmp / "global")
        client_models = {c.client_id: NGM.load(tmp / "clients" / c.client_id) for c in clients
                         if (tmp / "clients" / c.client_id).is_dir()}
    stitched = result.get("stitched", {})
    merged = global_model.graph
    say("global NGM on samples + public-train; centralized NGM")
    t = time.perf_counter()
    with_public, _ = distil(client_models, result["info"]["n_rows"], merged, settings,
                            samples, s.allocation, public_train, s.seed, s.gibbs_sweeps, s.soft_targets)
    times["global_public"] = time.perf_counter() - t
    t = time.perf_counter()
    pooled = pd.concat([c.train[shared] for c in clients])
    central = NGM.fit(pooled, global_model.schema, merged, settings)
    times["centralized"] = time.perf_counter() - t
    models = {**client_models, "global": global_model, "global+public": with_public,
              "centralized": central}
    tests = {c.client_id: c.test for c in clients} | {"public-test": public_test}
    say("evaluating every model on every test set")
    t = time.perf_counter()
    metrics = grid(models, tests, s.targets)
    times["evaluate"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - t0
    report.update(metrics=metrics, stitched=stitched,
                  comparisons=comparisons(metrics, [c.client_id for c in clients], stitched, s.targets),
                  off_graph_share_max={m: float(model.off_graph_share().max()) for m, model in models.items()},
                  wall_seconds=times)
    if plot_dir is not None:
        graphs = {c.client_id: from_edges(c.schema.names, result["client_graphs"][c.client_id]).subgraph(shared)
                  for c in clients if c.client_id in result["client_graphs"]}
        plot_graphs({**graphs, "merged": merged}, Path(plot_dir) / "ngm_graphs.png")
    if out is not None:
        global_model.save(out)
    return global_model, report


def server_procedure(fed, settings: dict, out: str | None = None, clients_out: str | None = None,
                     stitch: dict | None = None) -> dict:
    """The server's side on every backend (``fedpgm.federation.runner``): ``fit_fedngm`` with
    ``settings`` (its keywords; the NGM settings under ``"ngm"``); the global model saved to
    ``out``, each client's model to ``clients_out/<client>``; with ``stitch`` ({"clients",
    "targets"}), those clients stitch the released model and reply with its metrics."""
    kwargs = dict(settings)
    ngm = NGMSettings.from_dict(kwargs.pop("ngm", {}))
    result = fit_fedngm(fed, settings=ngm, **kwargs)
    if out is not None and result.global_model is not None:
        result.global_model.save(out)
    if clients_out is not None:
        for client, model in result.client_models.items():
            model.save(Path(clients_out) / client)
    def edges(graph) -> list:
        return sorted(sorted(e) for e in graph.edges())

    reply: dict[str, Any] = {"released": result.released, "refusal": result.refusal, "info": result.info,
                             "merged_edges": edges(result.merged),
                             "client_graphs": {c: edges(g) for c, g in result.client_graphs.items()}}
    if stitch and result.released:
        t0 = time.perf_counter()
        replies = fed.broadcast("stitch", config={"targets": stitch["targets"]},
                                clients=stitch["clients"]).require_all()
        reply.update(stitched={c: m.config["metrics"] for c, m in replies.items()},
                     stitch_seconds=time.perf_counter() - t0)
    return reply

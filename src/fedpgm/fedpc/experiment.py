"""One FedPC experiment: partition a dataset, fit on a backend, evaluate next to centralized.

``run_fedpc(dataset, FitSettings(...))`` returns the fitted ``FedPC`` and the report the CLI
writes as JSON: ``dataset, split, clients, backend, seed, test_loglik`` (mean nats per test
row), ``centralized_test_loglik``, ``accuracy, f1`` (positive class), ``f1_macro`` (with a
label), ``train_seconds`` (federated wall clock here), ``critical_path_seconds`` (slowest client
plus server: the time with one machine per client), ``centralized_train_seconds``,
``relative_runtime`` (critical path / centralized) and ``bytes_up, bytes_down, messages``.

Timing is like for like: every client and the centralized learner run single-threaded and are
timed by their process CPU time, so a shared or busy machine does not skew the ratio.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedpgm.circuits.learners import learner_spec
from fedpgm.data import images
from fedpgm.data import partition
from fedpgm.data.partition import SPLITS, most_clients
from fedpgm.data.dataset import Dataset
from fedpgm.errors import FedpgmError
from fedpgm.federation.apps import check_backend
from fedpgm.federation.base import DEFAULT_TIMEOUT_S
from fedpgm.federation.lifecycle import private_tempdir
from fedpgm.metrics import classification
from fedpgm.fedpc import defaults
from fedpgm.fedpc.client import warm_up
from fedpgm.fedpc.estimator import FederatedPC
from fedpgm.fedpc.model import FedPC
from fedpgm.fedpc.procedure import fit_on
from fedpgm.fedpc.server import PLACEMENTS, learner_params
from fedpgm.fedpc.trees import TreeCircuit, check_fcdt
from fedpgm.threads import one_thread

HANDLERS = "fedpgm.fedpc.client:HANDLERS"
FCDT_PARAMS = ("max_depth", "min_samples_leaf", "combine", "trees", "ensemble")


@dataclass
class FitSettings:
    """One FedPC fit: the split and number of clients, gluing (random, combinatorial, aligned) and
    clusters per subspace, the local learner and its parameters, placement, backend, partition
    options, deadlines and quorum, and row alignment."""
    split: str = "horizontal"
    clients: int = 2
    clusters: int | None = None  # None: auto (fedpgm.fedpc.defaults)
    glue: str = "auto"  # fedpgm.fedpc.defaults.glue
    products: int | None = None
    learner: str = "learnspn"
    params: dict = field(default_factory=dict)
    placement: str = "server"
    backend: str = "inprocess"
    seed: int = 0
    partition: dict = field(default_factory=dict)  # partitioner options (scheme, label_to, ...)
    centralized: bool = True
    timeout: float = DEFAULT_TIMEOUT_S  # seconds per exchange with the clients
    min_clients: int | None = None  # horizontal: go on with this many clients if others fail
    align: str = "none"  # "psi": private row alignment before the fit (fedpgm.federation.psi)
    smoothing: float | None = None  # aligned gluing: pseudo-rows per cluster tuple (None: auto)
    refine_passes: int | None = None  # horizontal: federated EM passes at most (None: auto; 0: none)
    cluster_fit: str = "learn"  # or refit (fedpgm.fedpc.defaults.cluster_fit)

    def estimator(self) -> FederatedPC:
        """The ``FederatedPC`` of these settings (its parameters: this fit's)."""
        return FederatedPC(clusters=self.clusters, glue=self.glue, products=self.products, learner=self.learner,
                           params=dict(self.params), backend=self.backend, timeout=self.timeout,
                           min_clients=self.min_clients, align=self.align, smoothing=self.smoothing,
                           refine_passes=self.refine_passes, cluster_fit=self.cluster_fit, seed=self.seed)

    def check(self, fcdt: bool = False) -> "FitSettings":
        """``self`` when every setting holds, else a one-line ``FedpgmError``; run before any data
        is read or worker started: FC[DT]'s parameters (``fcdt``), or the estimator's
        (``FederatedPC.check_params``, the learner's own included), the split and the quorum."""
        if self.split not in SPLITS:
            raise FedpgmError(f"unknown split '{self.split}'; use one of {', '.join(SPLITS)}")
        if self.clients < 1:
            raise FedpgmError(f"--clients must be >= 1, got {self.clients}")
        if self.min_clients is not None and not 1 <= self.min_clients <= self.clients:
            raise FedpgmError(f"--min-clients must lie in 1..{self.clients} (--clients), got {self.min_clients}")
        if self.placement not in PLACEMENTS:
            raise FedpgmError(f"unknown placement '{self.placement}'; use one of {', '.join(PLACEMENTS)}")
        if fcdt:
            check_backend(self.backend)
            fcdt_args(self)
        else:
            self.estimator().check_params()
        return self

    def fit_args(self) -> dict:
        """``fit_fedpc``'s keyword arguments."""
        return {**self.estimator().fit_args(), "placement": self.placement}


# The FedPC paper's Table 4 (App. E.3): LearnSPN (RDC threshold, min_instances_slice) and
# gluing per setting and dataset (Income = adult, Credit = credit, Cancer = breast_cancer); the
# paper's horizontal rows need no gluing (random: Algorithm 1's, a no-op there). One place:
# benchmarks/fedpc_density.py --protocol paper reads it.
PAPER_TABLE4: dict[tuple[str, str], dict[str, Any]] = {
    ("horizontal", "adult"): {"threshold": 0.3, "min_instances_slice": 200, "glue": "random"},
    ("horizontal", "credit"): {"threshold": 0.5, "min_instances_slice": 200, "glue": "random"},
    ("horizontal", "breast_cancer"): {"threshold": 0.4, "min_instances_slice": 300, "glue": "random"},
    **{(split, name): {"threshold": t, "min_instances_slice": m, "glue": "combinatorial"}
       for split in ("vertical", "hybrid")
       for name, t, m in (("adult", 0.4, 100), ("credit", 0.5, 50), ("breast_cancer", 0.4, 300))},
}


def paper_settings(split: str, dataset: str, base: FitSettings) -> FitSettings:
    """``base`` with Table 4's LearnSPN settings and gluing for ``split`` on ``dataset``, in one
    pass (no federated EM refinement)."""
    if (split, dataset) not in PAPER_TABLE4:
        raise FedpgmError(f"the paper's Table 4 has no {split} setting for '{dataset}'; it lists "
                          f"{sorted({d for _, d in PAPER_TABLE4})}")
    row = PAPER_TABLE4[(split, dataset)]
    params = {**base.params, "threshold": row["threshold"], "min_instances_slice": row["min_instances_slice"]}
    return replace(base, split=split, params=params, glue=row["glue"], refine_passes=0)


def centralized(ds: Dataset, settings: FitSettings):
    """The same learner on the pooled train split, under the clients' thread limits
    (``fedpgm.threads``) and as warm as a client's process (``fedpc.client.warm_up``): (model, CPU
    seconds). Auto settings are resolved from the pooled rows, as each client does from its own."""
    params = defaults.resolve(learner_params(settings.learner, settings.params, settings.seed), len(ds.train))
    with one_thread(), private_tempdir("fedpgm-warm-up-") as scratch:
        warm_up(scratch / "warm-up")
        t0 = time.process_time()
        model = learner_spec(settings.learner).estimator(**params).fit(ds.train, ds.schema)
        return model, time.process_time() - t0


def evaluate(model_ll: np.ndarray, proba: np.ndarray | None, ds: Dataset) -> dict:
    out = {"test_loglik": float(model_ll.mean())}
    if proba is not None:
        out.update(classification(proba, ds.test[ds.schema.label].to_numpy(dtype=float)))
    return out


def image_cells(settings: FitSettings, ds: Dataset) -> FitSettings:
    """Dense PD clients of a vertical or hybrid image split cut their regions into cells of the
    whole image's size (side / pieces), so together they match the centralized circuit; in a
    horizontal split every client holds the whole image and its circuit is the centralized
    one's size (the paper's Table 6)."""
    found = images.layout(ds.schema)
    if found is None or settings.split == "horizontal" or settings.params.get("cell") is not None:
        return settings
    pieces = settings.params.get("pieces", 8)
    return replace(settings, params={**settings.params, "cell": max(found[0]) / pieces})


def within_columns(settings: FitSettings, ds: Dataset, fcdt: bool = False) -> FitSettings:
    """``settings`` checked, with as many clients as ``ds``'s columns allow a column split (each
    client a column of its own: ``data.partition.most_clients``), and a note where that is
    fewer than asked: a narrow table's vertical or hybrid run degrades instead of failing.
    ``fcdt``: the settings of an FC[DT] fit (``FitSettings.check``)."""
    settings.check(fcdt)
    most = most_clients(ds.schema, settings.split, **settings.partition)
    if most is None or settings.clients <= most or most < (2 if settings.split == "hybrid" else 1):
        return settings
    print(f"note: {ds.name} has columns for {most} {settings.split} clients of their own, not "
          f"{settings.clients}; fitting with {most}", file=sys.stderr)
    return replace(settings, clients=most, min_clients=None if settings.min_clients is None
                   else min(settings.min_clients, most))


def run_fedpc(ds: Dataset, settings: FitSettings, out: str | Path | None = None,
              mode: str = "processes") -> tuple[FedPC | None, dict]:
    """Partition, fit, evaluate (and save to ``out``); see the module doc for the report."""
    settings, requested = within_columns(settings, ds), settings.clients
    part = partition(ds, settings.split, settings.clients, settings.seed, **settings.partition)
    if learner_spec(settings.learner).dense:  # density of the pixels: the label only shapes the partition
        part, ds = part.drop_label(), ds.drop_label()
        settings = image_cells(settings, ds)
    label = ds.schema.label
    wall = time.perf_counter()
    result, model = fit_on(part, settings.fit_args(), settings.backend, settings.timeout, FedPC, ds=ds, mode=mode)
    wall = time.perf_counter() - wall - result["finish_seconds"]
    info = result["info"]
    ll = np.asarray(result["test_ll"])
    proba = np.asarray(result["proba"]) if label else None
    comm = info["communication"]
    report = {"dataset": ds.name, "split": settings.split, "clients": settings.clients,
              "backend": settings.backend, "seed": settings.seed, "settings": asdict(settings),
              **evaluate(ll, proba, ds), "train_seconds": info["train_seconds"], "federated_wall_seconds": wall,
              "critical_path_seconds": info["critical_path_seconds"],
              "client_seconds": info["client_seconds"], "server_seconds": info["server_seconds"],
              "bytes_up": comm["bytes_up"], "bytes_down": comm["bytes_down"], "messages": comm["messages"],
              "rounds": comm["rounds"], "plan": info["plan"], "n_train": len(ds.train), "n_test": len(ds.test)}
    if requested != settings.clients:  # (a narrow table: ``within_columns``)
        report["settings"]["clients_requested"] = requested
    for key in ("n_nodes", "n_edges", "n_params", "left_out", "client_policy", "alignment", "glue", "clusters",
                "cluster_fit", "tuple_model", "em", "shared_with_server"):
        if key in info:
            report[key] = info[key]
    pixels = images.layout(ds.schema) is not None and images.levels(ds.schema) is not None
    if pixels:
        report["test_bpd"] = images.bits_per_dim(ll, len(ds.schema))
    if settings.centralized:
        central, seconds = centralized(ds, settings)
        report["centralized_test_loglik"] = central.score(ds.test)
        if pixels:
            report["centralized_test_bpd"] = images.bits_per_dim(report["centralized_test_loglik"], len(ds.schema))
            report["centralized_n_params"] = central.n_params
        if label:
            c = classification(central.predict_proba(ds.test), ds.test[label].to_numpy(dtype=float))
            report.update({f"centralized_{k}": v for k, v in c.items()})
        report["centralized_train_seconds"] = seconds
        report["relative_runtime"] = info["critical_path_seconds"] / seconds
    if out is not None and model is not None:  # last, so an interrupted run leaves no model without its report
        model.save(out)
    return model, report


def fcdt_args(settings: FitSettings) -> dict:
    """``fit_fcdt``'s keyword arguments: the seed and ``settings.params`` (checked names)."""
    unknown = sorted(set(settings.params) - set(FCDT_PARAMS))
    if unknown:
        raise FedpgmError(f"unknown FC[DT] parameter(s) {unknown}; allowed: {list(FCDT_PARAMS)}")
    p = settings.params
    check_fcdt(p.get("max_depth"), p.get("min_samples_leaf"), p.get("combine", "auto"), p.get("trees"),
               p.get("ensemble", "bagging"))
    return {"seed": settings.seed, "align": settings.align, **settings.params}


def run_fcdt(ds: Dataset, settings: FitSettings, out: str | Path | None = None) -> tuple[TreeCircuit, dict]:
    """FC[DT] (``fedpgm.fedpc.trees``) on the same partition and either backend;
    ``settings.params`` may hold ``max_depth``, ``min_samples_leaf``, ``combine``, ``ensemble``
    and ``trees`` (per client). A classifier: the report has no log-likelihoods."""
    if ds.schema.label is None:
        raise FedpgmError(f"FC[DT] is a classifier; {ds.name} has no label (choose one with --label)")
    settings, requested = within_columns(settings, ds, fcdt=True), settings.clients
    part = partition(ds, settings.split, settings.clients, settings.seed, **settings.partition)
    wall = time.perf_counter()
    result, model = fit_on(part, fcdt_args(settings), settings.backend, settings.timeout, TreeCircuit)
    wall = time.perf_counter() - wall - result["finish_seconds"]
    comm = model.info["communication"]
    label = ds.schema.label
    report = {"dataset": ds.name, "split": settings.split, "clients": settings.clients, "backend": settings.backend,
              "seed": settings.seed, "settings": asdict(settings), "method": "FC[DT]",
              **classification(model.predict_proba(ds.test), ds.test[label].to_numpy(dtype=float)),
              "train_seconds": model.info["train_seconds"], "federated_wall_seconds": wall,
              "critical_path_seconds": model.info["critical_path_seconds"],
              "clients_with_trees": model.info["clients_with_trees"], "combine": model.combine,
              "ensemble": model.info["ensemble"], "trees_per_client": model.info["trees_per_client"],
              "trees_fitted": model.info["trees_fitted"], "shared_with_server": model.info["shared_with_server"],
              "single_class_clients": model.info["single_class_clients"],
              "min_samples_leaf": model.info["min_samples_leaf"], "bytes_up": comm["bytes_up"],
              "bytes_down": comm["bytes_down"], "messages": comm["messages"], "rounds": comm["rounds"],
              "n_train": len(ds.train), "n_test": len(ds.test)}
    if "alignment" in model.info:
        report["alignment"] = model.info["alignment"]
    if requested != settings.clients:  # (a narrow table: ``within_columns``)
        report["settings"]["clients_requested"] = requested
    if out is not None:
        model.save(out)
    return model, report

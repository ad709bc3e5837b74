"""Where a FedPC client's time goes: learner work of the slowest client vs the centralized fit.

Vertical x2 (or horizontal x5 with label skew) under the paper's Table 4 settings
(``PAPER_TABLE4``; vertical: combinatorial gluing, K = 2). For each dataset and seed: the
federated run's relative runtime (``run_fedpc``, CPU seconds, one thread everywhere), and,
counted while the learner runs, the work LearnSPN does: RDC calls and their cells (rows x
variables of each slice tested) and k-means calls and cells, for the centralized fit and for
each client repeating its fit steps in this process (``fedpgm.fedpc.client.fit``: vertical,
k-means with K = 2 on its own columns and one LearnSPN per cluster; horizontal, one LearnSPN on
its rows). The counters wrap ``fedpgm.circuits.learnspn.rdc_matrix`` and
``LearnSPNBuilder.cluster`` for the run (a profiling harness; the learner is unchanged). Prints JSON.

    python benchmarks/fedpc_client_work.py --split vertical --seeds 3 --out results/fedpc_vertical_work.json
    python benchmarks/fedpc_client_work.py --split horizontal --datasets adult,credit --seeds 3 \
        --out results/fedpc_horizontal_work.json

``--peer spflow`` (the paper's learner, SPFlow 1.1.0, an optional extra) repeats the learner's
steps with both libraries on the same numbers: every column standardised on the table that
learns it (the paper's preprocessing; Gaussian leaves throughout, so for data without
categorical columns: breast cancer; SPFlow 1.1.0 fails on credit's Table 4 settings, recorded
as that library's ``error``), the centralized fit and each client's k-means split and cluster
fits, the two libraries in turn (``--peer-repeats``, medians of CPU seconds, one thread). Its
``relative_learner_runtime`` is the slowest client's learner time over the centralized one's,
per library: how much of the ratio the learner's fixed costs set. (No client policy floor
here: SPFlow has no ``min_leaf_rows``.)

    python benchmarks/fedpc_client_work.py --split vertical --datasets breast_cancer --seeds 3 \
        --peer spflow --out results/fedpc_vertical_work_spflow.json
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit  # noqa: E402

from fedpgm.circuits import learnspn  # noqa: E402
from fedpgm.circuits.learners import learner_spec  # noqa: E402
from fedpgm.data import load_dataset, partition  # noqa: E402
from fedpgm.fedpc.client import kmeans, standardised  # noqa: E402
from fedpgm.fedpc.experiment import FitSettings, paper_settings, run_fedpc  # noqa: E402
from fedpgm.fedpc.server import learner_params  # noqa: E402
from fedpgm.threads import one_thread  # noqa: E402


@contextmanager
def counted(work: dict):
    """Count RDC and k-means calls and cells into ``work`` while the block runs."""
    rdc, cluster = learnspn.rdc_matrix, learnspn.LearnSPNBuilder.cluster

    def counting_rdc(data, cards, **kw):
        work["rdc_calls"] += 1
        work["rdc_cells"] += data.size
        return rdc(data, cards, **kw)

    def counting_cluster(self, data, scope):
        work["kmeans_calls"] += 1
        work["kmeans_cells"] += data.size
        return cluster(self, data, scope)

    learnspn.rdc_matrix, learnspn.LearnSPNBuilder.cluster = counting_rdc, counting_cluster
    try:
        with one_thread():
            start = time.process_time()
            yield
            work["cpu_seconds"] = time.process_time() - start
    finally:
        learnspn.rdc_matrix, learnspn.LearnSPNBuilder.cluster = rdc, cluster


def fresh() -> dict:
    return {"rdc_calls": 0, "rdc_cells": 0, "kmeans_calls": 0, "kmeans_cells": 0, "cpu_seconds": 0.0}


SPLITS = {"vertical": (2, {}), "horizontal": (5, {"scheme": "label-skew"})}  # clients, partition options


def one(name: str, seed: int, split: str) -> dict:
    ds = load_dataset(name, seed=seed)
    clients, options = SPLITS[split]
    settings = paper_settings(split, name, FitSettings(split=split, clients=clients, clusters=2, seed=seed,
                                                       partition=options))
    _, report = run_fedpc(ds, settings)
    params = learner_params(settings.learner, settings.params, seed)
    learner = learner_spec(settings.learner).estimator
    out = {"relative_runtime": report["relative_runtime"], "columns": {"centralized": len(ds.schema)}}
    work = {"centralized": fresh()}
    with counted(work["centralized"]):
        learner(**params).fit(ds.train, ds.schema)
    for i, client in enumerate(partition(ds, split, clients, seed, **options).clients):
        table = client.train[client.schema.names]
        key = f"client-{i}"
        work[key], out["columns"][key] = fresh(), len(client.schema)
        with counted(work[key]):
            labels = (kmeans(table.to_numpy(dtype=float), settings.clusters, seed) if split == "vertical"
                      else np.zeros(len(table), dtype=int))
            for k in np.unique(labels):  # with the client policy's floor on a row split's parts, as it fits
                rows = table.iloc[np.flatnonzero(labels == k)]
                learner(**params, min_leaf_rows=client.policy.min_rows).fit(rows, client.schema, reference=table)
    slowest = max((k for k in work if k != "centralized"), key=lambda k: work[k]["cpu_seconds"])
    out.update(work=work, slowest=slowest,
               cpu_ratio=work[slowest]["cpu_seconds"] / work["centralized"]["cpu_seconds"],
               rdc_cells_ratio=work[slowest]["rdc_cells"] / work["centralized"]["rdc_cells"])
    print(name, seed, {k: round(out[k], 3) for k in ("relative_runtime", "cpu_ratio", "rdc_cells_ratio")},
          file=sys.stderr, flush=True)
    return out


def peer_work(name: str, seed: int, split: str, repeats: int) -> dict:
    """Median CPU seconds of the centralized fit and of each client's learner steps, fedpgm's
    LearnSPN and SPFlow's in turn on the same standardised tables; per library the slowest
    client's seconds over the centralized fit's."""
    from pc_vs_spflow import spflow_fit

    ds = load_dataset(name, seed=seed)
    clients, options = SPLITS[split]
    settings = paper_settings(split, name, FitSettings(split=split, clients=clients, clusters=2, seed=seed,
                                                       partition=options))
    params = learner_params(settings.learner, settings.params, seed)
    size, threshold = params["min_instances_slice"], params["threshold"]
    fits = {"fedpgm": lambda x, m=size: learner_spec("learnspn").estimator(min_instances_slice=m, threshold=threshold,
                                                                seed=seed).fit(x),
            "spflow": lambda x, m=size: spflow_fit(x, m, threshold)}
    tables = {"centralized": standardised(ds.train.to_numpy(dtype=float))}
    tables.update({f"client-{i}": standardised(c.train[c.schema.names].to_numpy(dtype=float))
                   for i, c in enumerate(partition(ds, split, clients, seed, **options).clients)})

    def steps(library: str, who: str) -> None:
        x = tables[who]
        labels = (kmeans(x, settings.clusters, seed) if split == "vertical" and who != "centralized"
                  else np.zeros(len(x), dtype=int))
        for k in np.unique(labels):
            fits[library](x[labels == k])

    seconds: dict = {lib: {who: [] for who in tables} for lib in fits}
    out: dict = {"min_instances_slice": size, "threshold": threshold, "repeats": repeats}
    warm = np.random.default_rng(0).normal(size=(400, 4))
    warm[:200, :2] += 3.0
    with one_thread():
        for fit in fits.values():  # one-time set-up of each library, untimed (a row and a column split)
            fit(warm, 100)
        for _ in range(repeats):
            for lib in [lib for lib in fits if lib not in out]:
                for who in tables:
                    start = time.process_time()
                    try:
                        steps(lib, who)
                    except RuntimeError as e:  # (SPFlow 1.1.0's RDC on credit: an empty eigenvalue set)
                        out[lib] = {"error": f"{who}: {type(e).__name__}: {e}"}
                        break
                    seconds[lib][who].append(time.process_time() - start)
    for lib, runs in seconds.items():
        if lib in out:
            continue
        median = {who: statistics.median(v) for who, v in runs.items()}
        slowest = max((w for w in median if w != "centralized"), key=median.__getitem__)
        out[lib] = {"cpu_seconds": median, "runs": runs, "slowest": slowest,
                    "relative_learner_runtime": median[slowest] / median["centralized"]}
    print(name, seed, "peer", {lib: out[lib].get("relative_learner_runtime", out[lib].get("error")) for lib in fits},
          file=sys.stderr, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=sorted(SPLITS), default="vertical")
    ap.add_argument("--datasets", default="adult,credit,breast_cancer")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--peer", choices=["spflow"], help="also time the learner's steps with this library")
    ap.add_argument("--peer-repeats", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.peer_repeats < 1:
        ap.error(f"--peer-repeats must be >= 1, got {args.peer_repeats}")
    if args.peer and importlib.util.find_spec(args.peer) is None:
        ap.error(f"--peer {args.peer} is not installed: .venv/bin/pip install -c constraints.txt -e '.[bench]'")
    clients = SPLITS[args.split][0]
    report: dict = {"settings": f"{args.split} x{clients}, Table 4 (PAPER_TABLE4)", "datasets": {}}
    for name in args.datasets.split(","):
        runs = [one(name, seed, args.split) for seed in range(args.seeds)]
        if args.peer:
            for seed, run in enumerate(runs):
                run["peer"] = peer_work(name, seed, args.split, args.peer_repeats)
        report["datasets"][name] = {
            "runs": runs,
            "median_relative_runtime": statistics.median(r["relative_runtime"] for r in runs),
            "median_cpu_ratio": statistics.median(r["cpu_ratio"] for r in runs),
            "median_rdc_cells_ratio": statistics.median(r["rdc_cells_ratio"] for r in runs)}
        if args.peer:
            report["datasets"][name].update({
                f"median_relative_learner_runtime_{lib}": statistics.median(
                    r["peer"][lib]["relative_learner_runtime"] for r in runs)
                for lib in ("fedpgm", args.peer) if all("error" not in r["peer"][lib] for r in runs)})
    emit(report, args.out)


if __name__ == "__main__":
    main()

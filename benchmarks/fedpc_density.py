"""FedPC Table 1: test log-likelihood and relative runtime, centralized vs federated.

For each dataset and seed: centralized LearnSPN on the pooled train split, then FedPC over
horizontal (5 clients, label skew), vertical (2) and hybrid (2) partitions, with the paper's
random gluing (K=2) and with aligned gluing (K=8). Relative runtime = (slowest client + server)
/ centralized, all single-threaded CPU seconds; ``relative_wall`` = the federation's wall time
(the server's, from describe to the assembled model: transfers and waits included) / the
centralized fit's wall time, in-process or (``--backend flower``) on a loopback Flower
deployment, every client on this machine's cores. Prints JSON (mean +- std over seeds per cell)
and writes a PNG beside it. ``--protocol paper`` runs instead the paper's Table 4 settings per
split and dataset (threshold, min_instances_slice, combinatorial gluing for vertical and hybrid,
K=2), each cell against a centralized LearnSPN with the same settings.

Log-likelihoods are in the data's own units. Each cell also gives ``gap_nats`` (centralized minus
federated, nats/row, which no change of units alters) and ``test_loglik_standardized``: the
log-likelihood of the data with continuous columns divided by their train-split std, the scale
the paper reports (its features are standardised), i.e. the raw value plus ``standardizing_shift``
= sum of log(train std) over continuous columns.

    python benchmarks/fedpc_density.py --seeds 5 --out results/fedpc_density.json
    python benchmarks/fedpc_density.py --protocol paper --seeds 5 --out results/fedpc_density_paper.json
    python benchmarks/fedpc_density.py --datasets adult,credit --seeds 1 --select 30 \
        --out results/fedpc_density_select.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import bar_panels, emit, mean_std  # noqa: E402

from fedpgm.data import load_dataset  # noqa: E402
from fedpgm.federation.base import ClientFailed  # noqa: E402
from fedpgm.fedpc.experiment import FitSettings, centralized, paper_settings, run_fedpc  # noqa: E402

SPLITS = (("horizontal", 5, {"scheme": "label-skew"}), ("vertical", 2, {}), ("hybrid", 2, {}))
METHODS = {"random K=2": {"glue": "random", "clusters": 2}, "aligned K=8": {"glue": "aligned", "clusters": 8}}


def standardizing_shift(ds) -> float:
    """sum of log(train std) over continuous columns: a test log-likelihood plus this is the
    log-likelihood of the data standardised by the train split (the change of variables)."""
    cont = [f.name for f in ds.schema.features if f.kind == "continuous"]
    sd = ds.train[cont].astype(float).std(ddof=0).to_numpy()
    return float(np.log(sd[sd > 0]).sum())


def plan(name: str, seed: int, protocol: str, min_instances: dict, budget_s: float | None = None
         ) -> list[tuple[str, FitSettings]]:
    """The federated cells of one dataset and seed: (label, settings). ``project``: this project's
    LearnSPN settings for every split, random K=2 and aligned K=8 gluing; ``paper``: Table 4's
    threshold, min_instances_slice and gluing per split (``PAPER_TABLE4``), K=2."""
    cells = []
    for split, k, opts in SPLITS:
        base = FitSettings(split=split, clients=k, partition=opts, seed=seed, centralized=False, refine_passes=0,
                           params={"min_instances_slice": min_instances.get(name, 100)})
        if budget_s is not None:  # every circuit's LearnSPN settings chosen on its learner's own rows
            base = replace(base, learner="learnspn-cv", params={"budget_s": budget_s})
        if protocol == "paper":
            s = paper_settings(split, name, replace(base, clusters=2))
            p = s.params
            glue = f", {s.glue} K=2" if split != "horizontal" else ""
            cells.append((f"{split} x{k}{glue} (paper: threshold {p['threshold']}, min {p['min_instances_slice']})", s))
            continue
        for method, m in METHODS.items():
            if split == "horizontal" and m["glue"] == "aligned":
                continue  # no single-client subspace: gluing does not apply
            key = f"{split} x{k}, {method}" if split != "horizontal" else f"{split} x{k}"
            cells.append((key, replace(base, **m)))
    return cells


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", default="breast_cancer,adult,credit")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--min-instances", default="breast_cancer=20,adult=100,credit=100",
                    help="LearnSPN min rows per slice, per dataset (NAME=N,...), for centralized and clients alike")
    ap.add_argument("--protocol", choices=("project", "paper"), default="project",
                    help="paper: Table 4's settings per split and dataset (fedpgm.fedpc.experiment.PAPER_TABLE4), "
                         "each cell against a centralized LearnSPN with the same settings")
    ap.add_argument("--select", type=float, metavar="BUDGET",
                    help="project protocol with learner learnspn-cv: every client circuit chooses its LearnSPN "
                         "settings on 10%% of its own rows within BUDGET s, the centralized fit within BUDGET x "
                         "clients s (the federation's time)")
    ap.add_argument("--backend", choices=("inprocess", "flower"), default="inprocess",
                    help="flower: every federated cell on a loopback Flower deployment (SuperLink and one "
                         "SuperNode per client); its wall time, describe to assembled model, is reported beside "
                         "the CPU-time critical path")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.select and args.protocol == "paper":
        ap.error("--select replaces the LearnSPN settings; the paper protocol fixes them (Table 4)")
    cells: dict = {}
    shifts: dict = {}
    refusals: dict = {}  # dataset -> cell -> why its clients refused
    min_instances = {k: int(v) for k, v in (p.split("=") for p in args.min_instances.split(","))}
    for name in args.datasets.split(","):
        for seed in range(args.seeds):
            ds = load_dataset(name, seed=seed, missing="impute")
            shifts.setdefault(name, []).append(standardizing_shift(ds))
            cell = cells.setdefault(name, {})
            references: dict = {}  # LearnSPN settings -> (centralized test LL, CPU seconds)
            for key, s in plan(name, seed, args.protocol, min_instances, args.select):
                # with --select the centralized search gets the whole federation's time (budget x clients)
                # and, as the clients' policy (min_rows 10) allows them, no EM refinement
                reference_settings = replace(s, params={**s.params, "budget_s": args.select * s.clients,
                                                        "max_em_iterations": 0}) if args.select else s
                params = tuple(sorted(reference_settings.params.items()))
                if params not in references:
                    wall = time.perf_counter()
                    model, seconds = centralized(ds, reference_settings)
                    references[params] = (model.score(ds.test), seconds, time.perf_counter() - wall)
                    label = f"centralized ({args.select * s.clients:g} s search)" if args.select else \
                        "centralized" if args.protocol == "project" else \
                        f"centralized (threshold {s.params['threshold']}, min {s.params['min_instances_slice']})"
                    c = cell.setdefault(label, {"test_loglik": [], "train_seconds": []})
                    c["test_loglik"].append(references[params][0])
                    c["train_seconds"].append(seconds)
                reference, seconds, reference_wall = references[params]
                try:
                    _, r = run_fedpc(ds, replace(s, backend=args.backend))
                except ClientFailed as e:  # e.g. a client's audit refused its reply: say so, go on
                    refusals.setdefault(name, {})[key] = str(e)
                    print(f"{name} seed {seed} {key}: refused ({e})", file=sys.stderr, flush=True)
                    continue
                c = cell.setdefault(key, {"test_loglik": [], "centralized_loglik": [], "relative_runtime": [],
                                          "wall_seconds": [], "relative_wall": [], "bytes": []})
                c["test_loglik"].append(r["test_loglik"])
                c["centralized_loglik"].append(reference)
                c["relative_runtime"].append(r["critical_path_seconds"] / seconds)
                c["wall_seconds"].append(r["train_seconds"])  # the server's: describe .. assembled model
                c["relative_wall"].append(r["train_seconds"] / reference_wall)
                c["bytes"].append(r["bytes_up"] + r["bytes_down"])
                print(f"{name} seed {seed} {key}: {r['test_loglik']:.3f} vs {reference:.3f}", file=sys.stderr,
                      flush=True)
    table = {d: {k: {m: mean_std(v) for m, v in c.items()} for k, c in cell.items()} for d, cell in cells.items()}
    for d, cell in table.items():
        shift = float(np.mean(shifts[d]))
        for c in cell.values():
            c["test_loglik_standardized"] = c["test_loglik"]["mean"] + shift
            if "centralized_loglik" in c:  # a federated cell, against the centralized fit with its settings
                cent = c.pop("centralized_loglik")["mean"]
                c["relative_gap"] = (cent - c["test_loglik"]["mean"]) / abs(cent)
                c["gap_nats"] = cent - c["test_loglik"]["mean"]
                c["relative_gap_standardized"] = c["gap_nats"] / abs(cent + shift)
    report = {"benchmark": "fedpc_density (Table 1)", "protocol": args.protocol, "seeds": args.seeds,
              "backend": args.backend, "cores": os.cpu_count(),
              "learner": f"learnspn-cv, {args.select:g} s per circuit" if args.select else "learnspn",
              "min_instances_slice": min_instances if args.protocol == "project" else "Table 4 (PAPER_TABLE4)",
              "standardizing_shift": shifts, "table": table, "refused": refusals}
    emit(report, args.out)
    if args.out:
        bar_panels(table, Path(args.out).with_suffix(".png"), "test_loglik", "test log-likelihood (nats/row)",
                   color=lambda k: "grey" if k.startswith("centralized") else "tab:blue")


if __name__ == "__main__":
    main()

"""FedPC Table 1: test log-likelihood and relative runtime, centralized vs federated.

For each dataset and seed: centralized LearnSPN on the pooled train split, then FedPC over
horizontal (5 clients, label skew), vertical (2) and hybrid (2) partitions, with the paper's
random gluing (K=2) and with aligned gluing (K=8). Relative runtime = (slowest client + server)
/ centralized, all single-threaded CPU seconds. Prints JSON (mean +- std over seeds per cell)
and writes a PNG beside it.

Log-likelihoods are in the data's own units. Each cell also gives ``gap_nats`` (centralized minus
federated, nats/row, which no change of units alters) and ``test_loglik_standardized``: the
log-likelihood of the data with continuous columns divided by their train-split std, the scale
the paper reports (its features are standardised), i.e. the raw value plus ``standardizing_shift``
= sum of log(train std) over continuous columns.

    python benchmarks/fedpc_density.py --seeds 5 --out docs/fedpc_density.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import bar_panels, emit, mean_std  # noqa: E402

from fedpgm.data import load_dataset  # noqa: E402
from fedpgm.fedpc.experiment import FitSettings, centralized, run_fedpc  # noqa: E402

SPLITS = (("horizontal", 5, {"scheme": "label-skew"}), ("vertical", 2, {}), ("hybrid", 2, {}))
METHODS = {"random K=2 (paper)": {"glue": "random", "clusters": 2}, "aligned K=8": {"glue": "aligned", "clusters": 8}}


def standardizing_shift(ds) -> float:
    """sum of log(train std) over continuous columns: a test log-likelihood plus this is the
    log-likelihood of the data standardised by the train split (the change of variables)."""
    cont = [f.name for f in ds.schema.features if f.kind == "continuous"]
    sd = ds.train[cont].astype(float).std(ddof=0).to_numpy()
    return float(np.log(sd[sd > 0]).sum())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", default="breast_cancer,adult,credit")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--min-instances", default="breast_cancer=20,adult=100,credit=100",
                    help="LearnSPN min rows per slice, per dataset (NAME=N,...), for centralized and clients alike")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cells: dict = {}
    shifts: dict = {}
    min_instances = {k: int(v) for k, v in (p.split("=") for p in args.min_instances.split(","))}
    for name in args.datasets.split(","):
        params = {"min_instances_slice": min_instances.get(name, 100)}
        for seed in range(args.seeds):
            ds = load_dataset(name, seed=seed, missing="impute")
            shifts.setdefault(name, []).append(standardizing_shift(ds))
            base = FitSettings(seed=seed, centralized=False, params=params)
            model, seconds = centralized(ds, base)
            cell = cells.setdefault(name, {})
            cell.setdefault("centralized", {"test_loglik": [], "train_seconds": []})
            cell["centralized"]["test_loglik"].append(model.score(ds.test))
            cell["centralized"]["train_seconds"].append(seconds)
            for split, k, opts in SPLITS:
                for method, m in METHODS.items():
                    if split == "horizontal" and m["glue"] == "aligned":
                        continue  # no single-client subspace: gluing does not apply
                    s = FitSettings(split=split, clients=k, partition=opts, seed=seed, centralized=False,
                                    params=params, **m)
                    _, r = run_fedpc(ds, s)
                    key = f"{split} x{k}, {method}" if split != "horizontal" else f"{split} x{k}"
                    c = cell.setdefault(key, {"test_loglik": [], "relative_runtime": [], "bytes": []})
                    c["test_loglik"].append(r["test_loglik"])
                    c["relative_runtime"].append(r["critical_path_seconds"] / seconds)
                    c["bytes"].append(r["bytes_up"] + r["bytes_down"])
                    print(f"{name} seed {seed} {key}: {r['test_loglik']:.3f} vs {cell['centralized']['test_loglik'][-1]:.3f}",
                          file=sys.stderr, flush=True)
    table = {d: {k: {m: mean_std(v) for m, v in c.items()} for k, c in cell.items()} for d, cell in cells.items()}
    for d, cell in table.items():
        cent = cell["centralized"]["test_loglik"]["mean"]
        shift = float(np.mean(shifts[d]))
        for key, c in cell.items():
            c["test_loglik_standardized"] = c["test_loglik"]["mean"] + shift
            if key != "centralized":
                c["relative_gap"] = (cent - c["test_loglik"]["mean"]) / abs(cent)
                c["gap_nats"] = cent - c["test_loglik"]["mean"]
                c["relative_gap_standardized"] = c["gap_nats"] / abs(cent + shift)
    report = {"benchmark": "fedpc_density (Table 1)", "seeds": args.seeds, "min_instances_slice": min_instances,
              "standardizing_shift": shifts, "table": table}
    emit(report, args.out)
    if args.out:
        bar_panels(table, Path(args.out).with_suffix(".png"), "test_loglik", "test log-likelihood (nats/row)",
                   color=lambda k: "grey" if k == "centralized" else "tab:blue")


if __name__ == "__main__":
    main()

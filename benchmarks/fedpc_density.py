"""FedPC Table 1: test log-likelihood and relative runtime, centralized vs federated.

For each dataset and seed: centralized LearnSPN on the pooled train split, then FedPC over
horizontal (5 clients, label skew), vertical (2) and hybrid (2) partitions, with the paper's
random gluing (K=2) and with aligned gluing (K=8). Relative runtime = (slowest client + server)
/ centralized, all single-threaded CPU seconds. Prints JSON (mean +- std over seeds per cell)
and writes a PNG beside it.

    python benchmarks/fedpc_density.py --seeds 5 --out docs/fedpc_density.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import bar_panels, emit, mean_std  # noqa: E402

from fedpgm.data import load_dataset  # noqa: E402
from fedpgm.fedpc.experiment import FitSettings, centralized, run_fedpc  # noqa: E402

SPLITS = (("horizontal", 5, {"scheme": "label-skew"}), ("vertical", 2, {}), ("hybrid", 2, {}))
METHODS = {"random K=2 (paper)": {"glue": "random", "clusters": 2}, "aligned K=8": {"glue": "aligned", "clusters": 8}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", default="breast_cancer,adult,credit")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--min-instances", default="breast_cancer=20,adult=100,credit=100",
                    help="LearnSPN min rows per slice, per dataset (NAME=N,...), for centralized and clients alike")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cells: dict = {}
    min_instances = {k: int(v) for k, v in (p.split("=") for p in args.min_instances.split(","))}
    for name in args.datasets.split(","):
        params = {"min_instances_slice": min_instances.get(name, 100)}
        for seed in range(args.seeds):
            ds = load_dataset(name, seed=seed, missing="impute")
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
        for key, c in cell.items():
            if key != "centralized":
                c["relative_gap"] = (cent - c["test_loglik"]["mean"]) / abs(cent)
    report = {"benchmark": "fedpc_density (Table 1)", "seeds": args.seeds, "min_instances_slice": min_instances,
              "table": table}
    emit(report, args.out)
    if args.out:
        bar_panels(table, Path(args.out).with_suffix(".png"), "test_loglik", "test log-likelihood (nats/row)",
                   color=lambda k: "grey" if k == "centralized" else "tab:blue")


if __name__ == "__main__":
    main()

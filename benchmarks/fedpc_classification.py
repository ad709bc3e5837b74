"""FedPC Table 7 and Fig. 5: classification and communication next to the federated baselines.

Per dataset and seed, on the same splits: FC[PC] (FedPC, p(label | features) from the joint)
for horizontal 5/10 (iid), vertical 2/3 and hybrid 2/3 clients (label at client-0); FC[DT]
(``fedpgm.fedpc.trees``: one decision tree per client, or with ``--ensemble boosting``
gradient-boosted trees; averaged over clients holding the same
columns, with leaves of at least 5 rows, multiplied as experts over disjoint ones (vertical),
bagged trees choosing their leaf size by 5-fold cross-validation; in vertical and hybrid splits the
label is shared with every client, since a tree needs it); FedAvg of
an MLP (100 rounds, horizontal) and SplitNN with an MLP per client (20 epochs, vertical),
both through fedpgm's runtime; and scikit-learn's HistGradientBoostingClassifier on the pooled
table as the centralized reference. With ``--peers`` (after ``bash scripts/install_peers.sh``)
also the paper's peers: FedTree (horizontal 5/10, vertical 2/3; it splits the pooled table
itself and does not support hybrid federations), FedAvg of TabNet (20 rounds) and SplitNN with a
TabNet per client (20 epochs). ``--methods`` picks a subset (credit: ``fcpc fcdt fedtree``,
since SplitNN's 20 epochs over 120,000 rows take hours here). Accuracy, F1 of the positive
class, macro-F1 and measured bytes; mean +- std over seeds. Writes a PNG of bytes beside the JSON.

    python benchmarks/fedpc_classification.py --datasets breast_cancer --min-instances 20 \
        --seeds 3 --out results/fedpc_classification_cancer.json
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import bar_panels, emit, mean_std  # noqa: E402

from fedpgm.baselines.fedavg import fedavg, predict_proba  # noqa: E402
from fedpgm.baselines.fedtree import fedtree_proba  # noqa: E402
from fedpgm.baselines.splitnn import opt_in, splitnn  # noqa: E402
from fedpgm.baselines.tabular import get_weights  # noqa: E402
from fedpgm.data import load_dataset, partition  # noqa: E402
from fedpgm.federation import InProcessFederation  # noqa: E402
from fedpgm.fedpc.experiment import FitSettings, paper_settings, run_fedpc  # noqa: E402
from fedpgm.metrics import classification  # noqa: E402
from fedpgm.fedpc.config_run import hgb  # noqa: E402
from fedpgm.fedpc.trees import fit_fcdt  # noqa: E402

SETTINGS = (("horizontal", 5), ("horizontal", 10), ("vertical", 2), ("vertical", 3), ("hybrid", 2), ("hybrid", 3))


def options(split: str) -> dict:
    return {"scheme": "iid"} if split == "horizontal" else {"label_to": "client-0"}


def run_seed(name: str, seed: int, args) -> dict:
    ds = load_dataset(name, seed=seed, missing="impute")
    truth = ds.test[ds.schema.label].to_numpy(float)
    out = {"centralized HGB": hgb(ds, truth)}
    for split, k in SETTINGS:
        t0 = time.perf_counter()
        if "fcpc" in args.methods:
            glue = {"glue": "aligned", "clusters": 8} if split != "horizontal" else {"glue": "random", "clusters": 2}
            s = FitSettings(split=split, clients=k, partition=options(split), seed=seed, centralized=False,
                            refine_passes=0,  # (the paper's one pass)
                            params={"min_instances_slice": args.min_instances, "by_label": args.by_label,
                                    "leaf": args.leaf}, **glue)
            if args.protocol == "paper":  # Table 4's threshold, slice minimum and gluing; plain LearnSPN, K=2
                s = paper_settings(split, name, replace(s, clusters=2, params={"leaf": args.leaf}))
            _, r = run_fedpc(ds, s)
            out[f"FC[PC] {split} x{k}"] = {m: r.get(m) for m in ("accuracy", "f1", "f1_macro")} | {
                "bytes": r["bytes_up"] + r["bytes_down"], "n_params": r.get("n_params")}
        if "fcdt" in args.methods:
            trees_part = partition(ds, split, k, seed,
                                   **({"label_to": "all"} if split != "horizontal" else options(split)))
            with InProcessFederation(trees_part, "fedpgm.fedpc.client:HANDLERS") as fed:
                bag = fit_fcdt(fed, seed=seed, combine=args.tree_root, trees=args.trees, ensemble=args.ensemble)
            comm = bag.info["communication"]
            out[f"FC[DT] {split} x{k}"] = classification(bag.predict_proba(ds.test), truth) | {
                "bytes": comm["bytes_up"] + comm["bytes_down"], "root": bag.combine,
                "min_samples_leaf": bag.info["min_samples_leaf"], "trees_fitted": bag.info["trees_fitted"]}
        part = partition(ds, split, k, seed, **options(split))
        if "mlp" in args.methods and split == "horizontal":
            with InProcessFederation(part, "fedpgm.baselines.fedavg:HANDLERS") as fed:
                res = fedavg(fed, rounds=args.rounds, seed=seed)
            m = classification(predict_proba(res, ds.test), truth)
            size = sum(v.size for v in get_weights(res["model"]).values())
            out[f"FedAvg MLP {split} x{k}"] = m | {"bytes": res["communication"]["bytes_up"]
                                                  + res["communication"]["bytes_down"], "n_params": size}
        elif "mlp" in args.methods and split == "vertical":
            with InProcessFederation(opt_in(part), "fedpgm.baselines.splitnn:HANDLERS") as fed:
                res = splitnn(fed, epochs=args.epochs, seed=seed)
            m = classification(res["test_proba"], res["test_labels"].astype(float))
            out[f"SplitNN MLP {split} x{k}"] = m | {"bytes": res["communication"]["bytes_up"]
                                                   + res["communication"]["bytes_down"]}
        if "fedtree" in args.methods and split != "hybrid":
            proba, seconds = fedtree_proba(ds.train, ds.test, ds.schema, split, k, seed)
            out[f"FedTree {split} x{k}"] = classification(proba, truth) | {"train_seconds": seconds}
        if "tabnet" in args.methods and split != "hybrid":
            out |= tabnet(ds, part, split, k, seed, truth)
        done = {m: v["accuracy"] for m, v in out.items() if m.endswith(f"{split} x{k}")}
        print(f"{name} seed {seed} {split} x{k}: " + ", ".join(f"{m.split()[0]} {a:.3f}" for m, a in done.items())
              + f" ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return out


def tabnet(ds, part, split: str, k: int, seed: int, truth) -> dict:
    """The TabNet baselines (FedAvg horizontal, SplitNN vertical) on one setting."""
    out = {}
    if split == "horizontal":
        with InProcessFederation(part, "fedpgm.baselines.fedavg:HANDLERS") as fed:
            res = fedavg(fed, rounds=20, lr=2e-2, batch_size=32 if len(ds.train) < 5000 else 1024, seed=seed,
                         arch="tabnet")
        m = classification(predict_proba(res, ds.test), truth)
        out[f"FedAvg TabNet {split} x{k}"] = m | {"bytes": res["communication"]["bytes_up"]
                                                  + res["communication"]["bytes_down"]}
    else:
        with InProcessFederation(opt_in(part), "fedpgm.baselines.splitnn:HANDLERS") as fed:
            res = splitnn(fed, epochs=20, seed=seed, arch="tabnet")
        m = classification(res["test_proba"], res["test_labels"].astype(float))
        out[f"SplitNN TabNet {split} x{k}"] = m | {"bytes": res["communication"]["bytes_up"]
                                                   + res["communication"]["bytes_down"]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", default="breast_cancer,adult,credit")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=100, help="FedAvg rounds")
    ap.add_argument("--epochs", type=int, default=20, help="SplitNN epochs")
    ap.add_argument("--min-instances", type=int, default=100, help="LearnSPN min rows per slice")
    ap.add_argument("--by-label", action=argparse.BooleanOptionalAction, default=True,
                    help="FC[PC]: LearnSPN with a root sum over the label (one structure per class)")
    ap.add_argument("--leaf", choices=["gaussian", "histogram"], default="gaussian",
                    help="FC[PC]: LearnSPN's leaves for continuous columns")
    ap.add_argument("--methods", nargs="+", choices=["fcpc", "fcdt", "mlp", "fedtree", "tabnet"],
                    default=["fcpc", "fcdt", "mlp"],
                    help="FC[PC], FC[DT], FedAvg/SplitNN with MLPs, FedTree, FedAvg/SplitNN with TabNet "
                         "(HGB always runs; the last two need bash scripts/install_peers.sh)")
    ap.add_argument("--tree-root", choices=["auto", "mean", "product"], default="auto",
                    help="FC[DT]'s root: auto = product over disjoint columns (vertical), else mean")
    ap.add_argument("--ensemble", choices=["bagging", "boosting"], default="bagging",
                    help="FC[DT]: each client's expert, decision trees or gradient-boosted trees")
    ap.add_argument("--trees", type=int, default=None,
                    help="FC[DT]: trees per client (bagging: default 1, bootstrap resamples when > 1; "
                         "boosting: the most stages, default 100)")
    ap.add_argument("--peers", action="store_true", help="shorthand for adding fedtree and tabnet to --methods")
    ap.add_argument("--protocol", choices=("project", "paper"), default="project",
                    help="paper: FC[PC] with Table 4's settings per split and dataset (fedpgm.fedpc.experiment."
                         "PAPER_TABLE4: threshold, min_instances_slice, combinatorial gluing, K=2; no by_label)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.peers:
        args.methods = list(dict.fromkeys(args.methods + ["fedtree", "tabnet"]))
    table = {}
    for name in args.datasets.split(","):
        runs = [run_seed(name, seed, args) for seed in range(args.seeds)]
        table[name] = {}
        for method in runs[0]:
            cell = {}
            for metric in runs[0][method]:
                vals = [r[method][metric] for r in runs if r[method].get(metric) is not None]
                if vals:  # numbers: mean +- std; settings (the tree root, leaf sizes): per seed
                    numeric = all(isinstance(v, (int, float)) for v in vals)
                    cell[metric] = mean_std(vals) if numeric else vals
            table[name][method] = cell
    paper = args.protocol == "paper"
    emit({"benchmark": "fedpc_classification (Table 7, Fig. 5)", "seeds": args.seeds, "protocol": args.protocol,
          "min_instances_slice": "Table 4 (PAPER_TABLE4)" if paper else args.min_instances,
          "by_label": False if paper else args.by_label, "leaf": args.leaf,
          "tree_root": args.tree_root, "ensemble": args.ensemble, "trees_per_client": args.trees,
          "methods": args.methods, "fedavg_rounds": args.rounds,
          "splitnn_epochs": args.epochs, "table": table}, args.out)
    if args.out:
        bar_panels(table, Path(args.out).with_suffix(".png"), "bytes", "bytes to train (log scale)", log=True,
                   color=lambda k: "tab:blue" if k.startswith("FC") else "tab:orange")


if __name__ == "__main__":
    main()

"""F-CM Table 5 (differential privacy) and Table 6 (number of clients): F-CM accuracies as one
setting varies, per model, mean +- std over seeds.

``--vary dp``: DP-SGD on every client update (Opacus; delta 1e-5, clipping norm 1.0) at the
target epsilons ``--values`` (default 10 5 1) for a client's whole training or, with
``--dp-scope update``, for each update it sends (the paper's setting), plus the accountant's
largest epsilon spent over all updates and per update.
``--vary clients``: the total client population K (default 10 20 50 100) with the overall data
fixed, 10 clients per round (all of them when K = 10), the late half joining as in Table 1.
``--lrs``: Adam learning rates to try (the paper tunes it per dataset and model on validation
data); each run keeps the one whose best validation task loss is lowest and reports it as ``lr``.

    python benchmarks/fcm_sensitivity.py --vary dp --network asia --out results/fcm_dp_asia.json
    python benchmarks/fcm_sensitivity.py --vary clients --network asia --out results/fcm_clients_asia.json
    python benchmarks/fcm_sensitivity.py --vary dp --dp-scope update --lrs 0.001 0.01 --out dp.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit, mean_std, pool  # noqa: E402

from fedpgm.concepts.data import make_concept_data  # noqa: E402
from fedpgm.concepts.experiment import FCMSettings, run_fcm_tuned  # noqa: E402
from fedpgm.concepts.federation import RoundSettings  # noqa: E402
from fedpgm.concepts.models import KINDS  # noqa: E402

DEFAULTS = {"dp": [10.0, 5.0, 1.0], "clients": [10, 20, 50, 100]}
METRICS = ("task_accuracy", "concept_accuracy", "label_accuracy", "seconds", "rounds", "lr", "best_val_task_loss")


def settings(network: str, kind: str, vary: str, value: float, rounds: int, seed: int,
             dp_scope: str = "training") -> FCMSettings:
    join = 10 if network in ("asia", "sachs") else 20
    r = dict(kind=kind, regime="fcm", rounds=rounds, join_round=join, seed=seed)
    if vary == "dp":
        return FCMSettings(network=network, rounds=RoundSettings(**r, dp_epsilon=float(value), dp_scope=dp_scope))
    k = int(value)
    return FCMSettings(network=network, clients=k, rounds=RoundSettings(**r, per_round=min(10, k)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vary", choices=sorted(DEFAULTS), required=True)
    ap.add_argument("--values", nargs="+", type=float)
    ap.add_argument("--network", default="asia")
    ap.add_argument("--models", nargs="+", default=list(KINDS))
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=0, help="run seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--dp-scope", choices=["training", "update"], default="training",
                    help="epsilon bounds a client's whole training or each update (the paper's setting)")
    ap.add_argument("--lrs", nargs="+", type=float, default=[1e-3],
                    help="learning rates to try; each run keeps the best on validation task loss")
    ap.add_argument("--out", default=None)
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="pool the seeds of earlier result files into --out")
    args = ap.parse_args()
    if args.merge:
        parts = [json.loads(Path(f).read_text()) for f in args.merge]
        result = {**parts[0], "seeds": [s for p in parts for s in p["seeds"]],
                  "lrs": sorted({lr for p in parts for lr in p["lrs"]}), "table": pool([p["table"] for p in parts]),
                  "lr_candidates": [c for p in parts for c in p["lr_candidates"]]}
        emit(result, args.out)
        if args.out:
            plot(result["table"], args.vary, result["network"], Path(args.out).with_suffix(".png"))
        return
    values = args.values or DEFAULTS[args.vary]
    runs: dict = {}
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    candidates: list = []
    for seed in seeds:
        data = make_concept_data(args.network, seed=seed)
        for kind in args.models:
            for value in values:
                _, rep = run_fcm_tuned(settings(args.network, kind, args.vary, value, args.rounds, seed,
                                                args.dp_scope), args.lrs, data=data)
                candidates.append({"model": kind, args.vary: value, "seed": seed, "lr_candidates": rep["lr_candidates"]})
                if args.vary == "dp":
                    rep["epsilon_spent"] = rep["dp"]["epsilon_spent_max"]
                    rep["epsilon_per_update"] = rep["dp"]["epsilon_per_update_max"]
                print(f"{args.network} {kind} {args.vary}={value:g} seed {seed}: task {rep['task_accuracy']:.3f} "
                      f"concepts {rep['concept_accuracy']:.3f} lr {rep['lr']:g} {rep['seconds']:.0f}s", file=sys.stderr, flush=True)
                cell = runs.setdefault(kind, {}).setdefault(f"{value:g}", {})
                for m in METRICS + (("epsilon_spent", "epsilon_per_update") if args.vary == "dp" else ()):
                    cell.setdefault(m, []).append(float(rep[m]))
    table = {kind: {v: {m: mean_std(x) for m, x in cell.items()} for v, cell in by.items()}
             for kind, by in runs.items()}
    emit({"benchmark": f"fcm_{args.vary}", "network": args.network, "seeds": seeds,
          "rounds": args.rounds, "values": values, "lrs": args.lrs,
          **({"dp_scope": args.dp_scope} if args.vary == "dp" else {}), "table": table,
          "lr_candidates": candidates}, args.out)
    if args.out:
        plot(table, args.vary, args.network, Path(args.out).with_suffix(".png"))


def plot(table: dict, vary: str, network: str, path: Path) -> None:
    """Task and concept accuracy vs the varied setting, one line per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for ax, metric in zip(axes, ("task_accuracy", "concept_accuracy")):
        for kind, by in table.items():
            xs = list(by)
            ax.errorbar(range(len(xs)), [by[v][metric]["mean"] for v in xs],
                        yerr=[by[v][metric]["std"] for v in xs], marker="o", ms=3, capsize=2, label=kind)
            ax.set_xticks(range(len(xs)), [("eps " if vary == "dp" else "K=") + v for v in xs])
        ax.set_ylabel(metric.replace("_", " "))
        ax.set_title(f"{network}: F-CM vs {'privacy budget' if vary == 'dp' else 'clients'}", fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()

"""F-CM Fig. 3: convergence when clients join (F-CM vs static vs re-init) and the share of
parameters each join changes.

    python benchmarks/fcm_joins.py --network asia --model cgm --out results/fcm_joins.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402

from fedpgm.concepts.data import make_concept_data  # noqa: E402
from fedpgm.concepts.experiment import FCMSettings, run_fcm  # noqa: E402
from fedpgm.concepts.federation import RoundSettings  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", default="asia")
    ap.add_argument("--model", default="cgm")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    join = 10 if args.network in ("asia", "sachs") else 20
    data = make_concept_data(args.network, seed=args.seed)
    runs = {}
    for regime in ("fcm", "static", "reinit"):
        _, rep = run_fcm(FCMSettings(network=args.network, rounds=RoundSettings(
            kind=args.model, regime=regime, rounds=args.rounds, join_round=join, seed=args.seed)), data=data)
        runs[regime] = {k: rep[k] for k in ("task_accuracy", "coverage", "rounds", "fraction_params_changed",
                                            "val_task_loss", "joins", "seconds")}
    emit({"benchmark": "fcm_joins", "network": args.network, "model": args.model, "join_round": join,
          "runs": runs}, args.out)
    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.6))
        for regime, run in runs.items():
            ax.plot(range(1, len(run["val_task_loss"]) + 1), run["val_task_loss"],
                    label=f"{regime} (changed {run['fraction_params_changed']:.0%})")
        ax.axvline(join, color="grey", ls="--", lw=0.8)
        ax.set_xlabel("round")
        ax.set_ylabel("validation task loss")
        ax.set_title(f"{args.network} {args.model}: clients join at round {join}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(Path(args.out).with_suffix(".png"), dpi=110)


if __name__ == "__main__":
    main()

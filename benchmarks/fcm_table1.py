"""F-CM Table 1: task accuracy, concept accuracy and coverage per network x model x regime.

Each cell runs ``fedpgm.concepts.experiment.run_fcm`` (20 clients, 10 per round, the late half
joining at round 10 for asia/sachs and 20 otherwise, up to 200 rounds, 2 local epochs, Adam,
batch 512, early stopping with patience 10) for each seed; mean +- std and wall seconds.
The data of a network and seed is generated once and shared by all its cells.

    python benchmarks/fcm_table1.py --networks asia sachs --seeds 1 --out docs/fcm_table1.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import bar_panels, emit, mean_std  # noqa: E402

from fedpgm.concepts.data import make_concept_data  # noqa: E402
from fedpgm.concepts.experiment import FCMSettings, run_fcm  # noqa: E402
from fedpgm.concepts.federation import RoundSettings  # noqa: E402
from fedpgm.concepts.models import KINDS  # noqa: E402

REGIMES = ("centralized", "local", "static", "fcm")
METRICS = ("task_accuracy", "concept_accuracy", "coverage", "seconds", "rounds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--networks", nargs="+", default=["asia"])
    ap.add_argument("--models", nargs="+", default=list(KINDS))
    ap.add_argument("--regimes", nargs="+", default=list(REGIMES))
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    runs: dict = {}
    for net in args.networks:
        join = 10 if net in ("asia", "sachs") else 20
        for seed in range(args.seeds):
            data = make_concept_data(net, seed=seed)
            for kind in args.models:
                for regime in args.regimes:
                    if kind == "opaque" and regime in ("static",):
                        continue
                    s = FCMSettings(network=net, rounds=RoundSettings(kind=kind, regime=regime, rounds=args.rounds,
                                                                      join_round=join, seed=seed))
                    _, rep = run_fcm(s, data=data)
                    print(f"{net} {kind} {regime} seed {seed}: task {rep['task_accuracy']:.3f} coverage "
                          f"{rep['coverage']:.2f} {rep['seconds']:.0f}s", file=sys.stderr, flush=True)
                    cell = runs.setdefault(net, {}).setdefault(f"{kind} {regime}", {m: [] for m in METRICS})
                    for m in METRICS:
                        cell[m].append(float(rep[m]))
    table = {net: {cell: {m: mean_std(v) for m, v in metrics.items()} for cell, metrics in cells.items()}
             for net, cells in runs.items()}
    emit({"benchmark": "fcm_table1", "seeds": args.seeds, "rounds": args.rounds, "table": table}, args.out)
    if args.out:
        bar_panels(table, Path(args.out).with_suffix(".png"), "task_accuracy", "task accuracy")


if __name__ == "__main__":
    main()

"""LearnSPN (and RAT-SPN + EM beside it) on the five DEBD sets. Prints JSON.

    .venv/bin/python benchmarks/pc_debd.py [--data-dir ../shared/data] [--sets nltcs,plants,...]
        [--out FILE]

LearnSPN's (min_instances_slice, threshold) is chosen per set on the validation file from a
small grid; the chosen model's test log-likelihood (nats per row) and learning time are
reported next to the published LearnSPN figures (Gens and Domingos 2013). Targets (issue 4):
at least as good on four of the five, each learned in under 60 s on this machine.

``--select BUDGET`` instead chooses LearnSPN's settings with ``fedpgm.circuits.selection``
(successive halving on the validation file, starting from a rule of rows and columns, not from
these five sets; on discrete data each candidate with univariate and with Chow-Liu-tree leaves)
within BUDGET wall seconds per set, selection included, and reports the published ID-SPN figure
beside LearnSPN's. ``--data-dir DIR --sets a,b`` runs it on any DEBD-format sets
(NAME.train.data / .valid.data / .test.data under DIR/debd).
"""

from __future__ import annotations

import argparse
import os
import time

from common import emit  # noqa: E402  (benchmarks/common.py)
from fedpgm.circuits.estimator import LearnSPN, RatSPN
from fedpgm.data import load_dataset

PUBLISHED = {"nltcs": -6.11, "plants": -12.98, "baudio": -40.50, "jester": -53.48, "dna": -82.52}
# ID-SPN (Rooshenas and Lowd 2014), as commonly quoted: the target for Chow-Liu-tree leaves
PUBLISHED_IDSPN = {"nltcs": -6.00, "plants": -12.54, "baudio": -39.79, "jester": -52.86, "dna": -81.21}
GRID = [(50, 0.1), (100, 0.05), (200, 0.3)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir")
    ap.add_argument("--sets", default=",".join(PUBLISHED))
    ap.add_argument("--ratspn-iterations", type=int, default=10)
    ap.add_argument("--select", type=float, metavar="BUDGET", help="choose settings by validation within BUDGET s")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.select:
        return selection(args)
    report = {"cores": os.cpu_count(), "grid": GRID, "sets": {}}
    for name in args.sets.split(","):
        ds = load_dataset(f"debd:{name}", data_dir=args.data_dir)
        tried = []
        for mi, th in GRID:
            t0 = time.perf_counter()
            model = LearnSPN(mi, th).fit(ds.train, ds.schema)
            seconds = time.perf_counter() - t0
            tried.append({"min_instances_slice": mi, "threshold": th, "learn_seconds": seconds,
                          "valid_loglik": model.score(ds.valid), "test_loglik": model.score(ds.test),
                          "n_nodes": model.circuit_.stats()["n_nodes"]})
            print(name, tried[-1], flush=True)
        best = max(tried, key=lambda r: r["valid_loglik"])
        t0 = time.perf_counter()
        rat = RatSPN(depth=3, repetitions=5, n_sums=5, n_inputs=5, em_iterations=args.ratspn_iterations,
                     batch_size=2000).fit(ds.train, ds.schema)
        rat_s = time.perf_counter() - t0
        report["sets"][name] = {
            "learnspn": best, "grid": tried, "published_learnspn": PUBLISHED.get(name),
            "at_least_published": best["test_loglik"] >= PUBLISHED.get(name, float("inf")),
            "under_60s": best["learn_seconds"] < 60,
            "ratspn_em": {"test_loglik": rat.score(ds.test), "learn_seconds": rat_s,
                          "n_nodes": rat.circuit_.stats()["n_nodes"], "em_passes": len(rat.history_)}}
        print(name, report["sets"][name]["ratspn_em"], flush=True)
    met = [n for n, r in report["sets"].items() if r["at_least_published"] and r["under_60s"]]
    report["sets_meeting_target"] = met
    emit(report, args.out)


def selection(args) -> None:
    """Each set: settings chosen on validation within the budget, test log-likelihood, seconds."""
    from fedpgm.circuits.selection import select_learnspn

    report = {"cores": os.cpu_count(), "budget_s": args.select, "sets": {}}
    for name in args.sets.split(","):
        ds = load_dataset(f"debd:{name}", data_dir=args.data_dir)
        model, sel = select_learnspn(ds.train, ds.valid, ds.schema, budget_s=args.select)
        test = model.score(ds.test)
        report["sets"][name] = {"test_loglik": test, "published_learnspn": PUBLISHED.get(name),
                                "published_idspn": PUBLISHED_IDSPN.get(name), **sel,
                                "at_least_published": test >= PUBLISHED.get(name, float("inf")),
                                "at_least_idspn": test >= PUBLISHED_IDSPN.get(name, float("inf")),
                                "within_budget": sel["over_budget_s"] == 0.0}
        print(name, sel["chosen"], round(test, 3), f"{sel['seconds']:.1f}s", flush=True)
    met = [n for n, r in report["sets"].items() if r["at_least_published"] and r["within_budget"]]
    report["sets_meeting_target"] = met
    report["sets_at_least_idspn"] = [n for n, r in report["sets"].items() if r["at_least_idspn"]]
    emit(report, args.out)


if __name__ == "__main__":
    main()

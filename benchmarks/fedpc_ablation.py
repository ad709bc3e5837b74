"""Where FedPC's gap to centralized comes from under the paper's Table 4 settings: one change at
a time against the paper's cell, same seeds, same centralized reference (Table 4's LearnSPN
settings on the pooled rows).

Horizontal x5 with label skew: is the gap the skew (iid rows instead), or the clients' circuits
being fully factorised because each holds fewer rows than min_instances_slice (the minimum
scaled to a client's share of the rows instead)? Hybrid x2 with combinatorial gluing: is it the
gluing (aligned gluing, which learns which clusters co-occur), the number of clusters, or the
slice minimum? Prints JSON (mean +- std over seeds, gap in nats/row, which no change of units
alters) and writes a PNG beside it.

    python benchmarks/fedpc_ablation.py --dataset breast_cancer --seeds 5 --out results/fedpc_ablation_cancer.json
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import bar_panels, emit, mean_std  # noqa: E402

from fedpgm.data import load_dataset  # noqa: E402
from fedpgm.fedpc.experiment import FitSettings, centralized, paper_settings, run_fedpc  # noqa: E402


def variants(dataset: str, seed: int) -> dict[str, tuple[str, FitSettings]]:
    """label -> (the paper cell it varies, settings)."""
    horizontal = paper_settings("horizontal", dataset, FitSettings(split="horizontal", clients=5, seed=seed,
                                                                    centralized=False, clusters=2,
                                                                    partition={"scheme": "label-skew"}))
    hybrid = paper_settings("hybrid", dataset, FitSettings(split="hybrid", clients=2, seed=seed, centralized=False,
                                                            clusters=2))
    scaled = max(2, round(horizontal.params["min_instances_slice"] / 5))  # a client's share of the rows

    def with_min(s: FitSettings, m: int) -> FitSettings:
        return replace(s, params={**s.params, "min_instances_slice": m})

    return {
        "horizontal x5 label skew (paper)": ("horizontal", horizontal),
        "horizontal x5 iid": ("horizontal", replace(horizontal, partition={"scheme": "iid"})),
        f"horizontal x5 label skew, min {scaled} (a client's share)": ("horizontal", with_min(horizontal, scaled)),
        f"horizontal x5 iid, min {scaled}": ("horizontal", with_min(replace(horizontal, partition={"scheme": "iid"}),
                                                                   scaled)),
        "hybrid x2 combinatorial K=2 (paper)": ("hybrid", hybrid),
        "hybrid x2 aligned K=2": ("hybrid", replace(hybrid, glue="aligned")),
        "hybrid x2 aligned K=8": ("hybrid", replace(hybrid, glue="aligned", clusters=8)),
        f"hybrid x2 combinatorial K=2, min {max(2, hybrid.params['min_instances_slice'] // 2)}":
            ("hybrid", with_min(hybrid, max(2, hybrid.params["min_instances_slice"] // 2))),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="breast_cancer")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cells: dict = {}
    for seed in range(args.seeds):
        ds = load_dataset(args.dataset, seed=seed, missing="impute")
        references: dict = {}
        for label, (split, s) in variants(args.dataset, seed).items():
            reference_settings = paper_settings(split, args.dataset, s)  # the paper's centralized LearnSPN
            key = tuple(sorted(reference_settings.params.items()))
            if key not in references:
                references[key] = centralized(ds, reference_settings)[0].score(ds.test)
            _, r = run_fedpc(ds, s)
            c = cells.setdefault(label, {"test_loglik": [], "gap_nats": []})
            c["test_loglik"].append(r["test_loglik"])
            c["gap_nats"].append(references[key] - r["test_loglik"])
            print(f"seed {seed} {label}: {r['test_loglik']:.3f} (centralized {references[key]:.3f})",
                  file=sys.stderr, flush=True)
    table = {label: {m: mean_std(v) for m, v in c.items()} for label, c in cells.items()}
    emit({"benchmark": "fedpc_ablation", "dataset": args.dataset, "seeds": args.seeds, "table": table}, args.out)
    if args.out:
        bar_panels({args.dataset: table}, Path(args.out).with_suffix(".png"), "gap_nats",
                   "gap to centralized, nats/row (lower: better)",
                   color=lambda k: "grey" if "(paper)" in k else "tab:blue")


if __name__ == "__main__":
    main()

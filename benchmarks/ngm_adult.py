"""FedNGM on UCI Adult, mirroring the paper's experiment, over several seeds.

Half of the complete rows public (public-train / public-test), three clients drawn from the
private half with skewed subpopulations (women, non-white, age >= 50; weight 5), each split
80/20, each holding one withheld feature (capital-gain, capital-loss, hours-per-week) besides
the 12 shared ones. Targets with all other shared features observed: age (MAE, RMSE), income
(AUC, AUPR), marital-status (micro/macro precision and recall). Models: each client NGM, the
global NGM from samples only and from samples + public-train, a centralized NGM on the pooled
client rows; stitching per client. Mean +- std over seeds of the primary metric per model,
test set and target, the paper's comparisons per seed, wall times. PNG beside the JSON.

    python benchmarks/ngm_adult.py --seeds 3 --out results/ngm_adult_default.json   # soft, 3x samples
    python benchmarks/ngm_adult.py --seeds 3 --hard --samples-factor 1 --out results/ngm_adult.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import bar_panels, emit, mean_std  # noqa: E402

from fedpgm.ngm.defaults import SAMPLES_FACTOR  # noqa: E402
from fedpgm.ngm.experiment import ExperimentSettings, run_ngm  # noqa: E402


def summarise(reports: list[dict]) -> dict:
    """table[test set][model][target] = mean_std of the primary metric across seeds."""
    first = reports[0]["metrics"]
    out: dict = {}
    for model, by_set in first.items():
        for test_set, by_target in by_set.items():
            for target, m in by_target.items():
                values = [r["metrics"][model][test_set][target][m["primary"]] for r in reports]
                out.setdefault(test_set, {}).setdefault(model, {})[f"{target} {m['primary']}"] = mean_std(values)
    return out


def tally(reports: list[dict]) -> dict:
    """How often each claim held, over seeds (and clients)."""
    out: dict = {}
    for r in reports:
        c = r["comparisons"]
        for y, v in c["global_beats_mean_client_on_public"].items():
            out.setdefault("global_beats_mean_client_on_public", {}).setdefault(y, []).append(v["holds"])
        for key in ("global_within_5pct_of_own", "stitching_improves"):
            for client, by in c[key].items():
                for y, v in by.items():
                    out.setdefault(key, {}).setdefault(y, []).append(v["holds"])
    return {k: {y: f"{sum(v)}/{len(v)}" for y, v in by.items()} for k, by in out.items()}


def better(a: float, b: float, higher: bool) -> bool:
    return a > b if higher else a < b


def claims_on_means(reports: list[dict]) -> dict:
    """The issue's targets on the mean over seeds of each primary metric: per target, the global
    NGMs (samples only, + public-train) against the mean client NGM on public-test; per client
    and target, the global model's shortfall against the client's own model on its test set
    (fraction, + = worse; target <= 0.05) and whether stitching improves on the global model."""
    def mean(get) -> float:
        return sum(get(r) for r in reports) / len(reports)

    clients, m = reports[0]["clients"], reports[0]["metrics"]
    out: dict = {"beats_mean_client_on_public": {}, "shortfall_vs_own": {}, "stitching_improves": {}}
    for y, by in m["global"]["public-test"].items():
        name, higher = by["primary"], by["higher_is_better"]
        mean_client = mean(lambda r: sum(r["metrics"][c]["public-test"][y][name] for c in clients) / len(clients))
        for model in ("global", "global+public"):
            value = mean(lambda r: r["metrics"][model]["public-test"][y][name])
            out["beats_mean_client_on_public"].setdefault(model, {})[y] = {
                "global": value, "mean_client": mean_client, "holds": better(value, mean_client, higher)}
        for c in clients:
            own = mean(lambda r: r["metrics"][c][c][y][name])
            glob = mean(lambda r: r["metrics"]["global"][c][y][name])
            shortfall = (own - glob) / abs(own) if higher else (glob - own) / abs(own)
            out["shortfall_vs_own"].setdefault(c, {})[y] = {"own": own, "global": glob, "shortfall": shortfall,
                                                           "holds": shortfall <= 0.05}
            before = mean(lambda r: r["stitched"][c][y]["global"][name])
            after = mean(lambda r: r["stitched"][c][y]["stitched"][name])
            out["stitching_improves"].setdefault(c, {})[y] = {"global": before, "stitched": after,
                                                             "holds": better(after, before, higher)}
    return out


def with_public_claim(reports: list[dict]) -> dict:
    """The first claim for the global model trained on samples + public-train."""
    out = {}
    for r in reports:
        for y, by in r["metrics"]["global+public"]["public-test"].items():
            name, higher = by["primary"], by["higher_is_better"]
            clients = [r["metrics"][c]["public-test"][y][name] for c in r["clients"]]
            mean_client = sum(clients) / len(clients)
            out.setdefault(y, []).append(better(by[name], mean_client, higher))
    return {y: f"{sum(v)}/{len(v)}" for y, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--samples-factor", type=float, default=SAMPLES_FACTOR)
    ap.add_argument("--gibbs-sweeps", type=int, default=0)
    ap.add_argument("--sparsity", type=float, default=0.25)
    ap.add_argument("--hard", action="store_true", help="fit the sampled values, not the predictions of the client model that drew each sample")
    ap.add_argument("--graph", default="glasso")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    reports = []
    for seed in range(args.seeds):
        settings = ExperimentSettings(seed=seed, samples_factor=args.samples_factor, graph=args.graph,
                                      gibbs_sweeps=args.gibbs_sweeps, sparsity=args.sparsity,
                                      soft_targets=not args.hard)
        _, report = run_ngm(settings,
                            progress=lambda text, s=seed: print(f"seed {s}: {text}", file=sys.stderr))
        reports.append(report)
    table = summarise(reports)
    result = {"benchmark": "ngm_adult", "seeds": args.seeds, "samples_factor": args.samples_factor,
              "gibbs_sweeps": args.gibbs_sweeps, "soft_targets": not args.hard, "graph": args.graph,
              "sparsity": args.sparsity, "primary_metrics": table, "claims_held": tally(reports),
              "claims_on_seed_means": claims_on_means(reports),
              "global_plus_public_beats_mean_client_on_public": with_public_claim(reports),
              "stitched": [r["stitched"] for r in reports],
              "off_graph_share_max": [r["off_graph_share_max"] for r in reports],
              "wall_seconds": {k: mean_std([r["wall_seconds"][k] for r in reports]) for k in reports[0]["wall_seconds"]},
              "bytes_up": [r["bytes_up"] for r in reports], "bytes_down": [r["bytes_down"] for r in reports],
              "merged_edges": [r["fedngm"]["merged_edges"] for r in reports],
              "shared_features": reports[0]["shared_features"], "withheld": reports[0]["withheld"],
              "skew": reports[0]["skew"], "rows": reports[0]["rows"]}
    emit(result, args.out)
    if args.out:
        targets = sorted({k for cell in table["public-test"].values() for k in cell})
        for target in targets:
            png = Path(args.out).with_name(Path(args.out).stem + f"_{target.split()[0]}.png")
            bar_panels({name: cells for name, cells in table.items()}, png, target, target)


if __name__ == "__main__":
    main()

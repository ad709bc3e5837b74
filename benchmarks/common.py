"""What every benchmark script shares: timing by median, and printing/writing the JSON."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path


def median_time(fn, repeats: int = 3, warmup: bool = False) -> tuple[float, list[float], object]:
    """Median seconds of ``repeats`` calls, all the times, and the last result."""
    if warmup:
        fn()
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, out


def interleaved(calls: dict, repeats: int = 3, warmup: bool = False) -> dict[str, dict]:
    """Time several calls in turn (A B A B ...: load drifts on a shared machine hit each alike):
    {name: {"median": seconds, "runs": [seconds], "result": the last result}}."""
    if warmup:
        for fn in calls.values():
            fn()
    out: dict[str, dict] = {name: {"runs": []} for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            out[name]["result"] = fn()
            out[name]["runs"].append(time.perf_counter() - t0)
    for timing in out.values():
        timing["median"] = statistics.median(timing["runs"])
    return out


def emit(report: dict, out: str | None) -> None:
    """Print the report as JSON and write it to ``out`` when given."""
    text = json.dumps(report, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")


def mean_std(values: list[float]) -> dict:
    """{"mean", "std" (sample; 0 for one value), "runs"}."""
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "runs": list(values)}


def pool(results: list):
    """Several result trees of the same layout merged seed-wise: every ``mean_std`` leaf pooled
    over the files that have it (a group of leaves keeps only those with the most runs, so a
    metric older files lack is dropped rather than averaged over fewer seeds); lists are pooled
    position by position; any other value is taken from the first file."""
    first = results[0]
    if isinstance(first, dict) and "runs" in first:
        return mean_std([x for r in results for x in r["runs"]])
    if isinstance(first, dict):
        out = {k: pool([r[k] for r in results if k in r]) for k in dict.fromkeys(k for r in results for k in r)}
        counts = {k: len(v["runs"]) for k, v in out.items() if isinstance(v, dict) and "runs" in v}
        return {k: v for k, v in out.items() if k not in counts or counts[k] == max(counts.values())}
    if isinstance(first, list) and len({len(r) for r in results}) == 1:
        return [pool(list(items)) for items in zip(*results)]
    return first


def bar_panels(table: dict, path: str | Path, metric: str, xlabel: str, log: bool = False,
               color=lambda key: "tab:blue") -> None:
    """One horizontal bar panel per dataset of ``table[dataset][method][metric]`` (mean +- std)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(table), figsize=(5 * len(table), 4), squeeze=False)
    for ax, (name, cell) in zip(axes[0], table.items()):
        keys = [k for k in cell if metric in cell[k]]
        ax.barh(range(len(keys)), [cell[k][metric]["mean"] for k in keys], log=log,
                xerr=None if log else [cell[k][metric]["std"] for k in keys], color=[color(k) for k in keys])
        ax.set_yticks(range(len(keys)), keys, fontsize=7)
        ax.set_title(name)
        ax.set_xlabel(xlabel)
    fig.tight_layout()
    fig.savefig(path, dpi=120)

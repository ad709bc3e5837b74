"""What every benchmark script shares: timing by median, and printing/writing the JSON."""

from __future__ import annotations

import json
import statistics
import time


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


def emit(report: dict, out: str | None) -> None:
    """Print the report as JSON and write it to ``out`` when given."""
    text = json.dumps(report, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")

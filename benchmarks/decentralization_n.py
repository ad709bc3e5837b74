"""How far N goes in a minute: exact losses of example A (all four schemes, both agents) vs N.

    .venv/bin/python benchmarks/decentralization_n.py [--budget 60] [--out FILE]

Prints JSON: per N, the number of training count tables of the largest view (collaborative:
4 views x 2 labels = 8 cells) and the wall time of one full example-A point; stops at the first N
whose point takes longer than the budget.
"""

from __future__ import annotations

import argparse
import os
import time

from common import emit  # noqa: E402  (benchmarks/common.py)
from fedpgm.decentralization.engine import n_count_tables
from fedpgm.decentralization.examples import example_a_point

NS = [1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 18, 20, 24, 28, 32]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = []
    for n in NS:
        t0 = time.perf_counter()
        point = example_a_point(0.75, n)
        seconds = time.perf_counter() - t0
        rows.append({"n": n, "count_tables": n_count_tables(8, n), "seconds": seconds,
                     "CL/CI_nats": point["losses_nats"]["CL/CI"]})
        print(rows[-1], flush=True)
        if seconds > args.budget:
            break
    within = [r["n"] for r in rows if r["seconds"] <= args.budget]
    emit({"cores": os.cpu_count(), "budget_s": args.budget, "rows": rows,
          "largest_n_within_budget": max(within) if within else None}, args.out)


if __name__ == "__main__":
    main()

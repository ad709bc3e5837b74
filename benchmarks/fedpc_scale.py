"""FedPC at scale: 1,000,000 rows x 20 continuous columns (a Gaussian mixture) over 16
horizontal clients, in-process. Reports wall time, critical path, test log-likelihood and
peak resident memory of the server and of the largest client process.

    python benchmarks/fedpc_scale.py --out results/fedpc_scale.json
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fedpgm.data.dataset import Dataset  # noqa: E402
from fedpgm.data.schema import Feature, Schema  # noqa: E402
from fedpgm.fedpc.experiment import FitSettings, run_fedpc  # noqa: E402


def mixture(rows: int, cols: int, k: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    means = rng.normal(0, 3, (k, cols))
    scales = rng.uniform(0.5, 1.5, (k, cols))
    z = rng.integers(0, k, rows)
    x = means[z] + scales[z] * rng.standard_normal((rows, cols))
    names = [f"x{i}" for i in range(cols)]
    frame = pd.DataFrame(x, columns=names)
    frame.index.name = "row_id"
    n_test = rows // 10
    return Dataset(f"mixture {rows}x{cols}", Schema(tuple(Feature(n, "continuous") for n in names)),
                   frame.iloc[n_test:], frame.iloc[:n_test])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--cols", type=int, default=20)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    ds = mixture(args.rows, args.cols, 8, 0)
    t0 = time.perf_counter()
    _, r = run_fedpc(ds, FitSettings(split="horizontal", clients=args.clients, seed=0, centralized=False,
                                     refine_passes=0,
                                     params={"min_instances_slice": 2000}))
    wall = time.perf_counter() - t0
    kib = 1024
    emit({"benchmark": "fedpc_scale", "rows": args.rows, "cols": args.cols, "clients": args.clients,
          "wall_seconds": wall, "train_seconds": r["train_seconds"], "critical_path_seconds": r["critical_path_seconds"],
          "test_loglik": r["test_loglik"], "n_nodes": r.get("n_nodes"), "bytes_up": r["bytes_up"],
          "peak_rss_server_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / kib,
          "peak_rss_largest_client_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / kib}, args.out)


if __name__ == "__main__":
    main()

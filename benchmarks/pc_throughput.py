"""Log-likelihood throughput of compiled circuits from 10^3 to 10^6 edges. Prints JSON.

    .venv/bin/python benchmarks/pc_throughput.py [--rows 20000] [--out FILE]

Circuits: RAT-SPN structures over 32 Gaussian variables, growing repetitions and sum/input
counts. Reported per size: rows/s and rows x edges/s, for the fused evaluation used by
``log_likelihood`` and for the plain layer-by-layer pass (used by EM, MPE and sampling), in
float64 and float32. The machine's peak for the same tensor ops is measured in the same run:
a dense matmul (GFLOP/s) and ``torch.logsumexp`` over a (rows, nodes, children) tensor
(child-evaluations/s), so "how close to peak" is a ratio, not a guess.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch

from common import emit, median_time  # noqa: E402  (benchmarks/common.py)
from fedpgm.circuits import CompiledCircuit
from fedpgm.circuits.queries import chunks
from fedpgm.circuits.ratspn import rat_spn
from fedpgm.data.schema import Feature, Schema

SIZES = [(1, 2, 2), (2, 4, 4), (4, 8, 8), (8, 16, 16), (8, 26, 26)]  # repetitions, sums, inputs


def chunked(cc: CompiledCircuit, X: np.ndarray, fused: bool) -> np.ndarray:
    """Root log-values of all rows, in the same row chunks the query functions use."""
    return np.concatenate([cc.forward(cc.tensor(X[s]), fused=fused)[cc.root].numpy()
                           for s in chunks(cc, len(X), fused=fused)])


def peaks(rows: int) -> dict:
    a = torch.randn(2048, 2048)
    t = median_time(lambda: a @ a, warmup=True)[0]
    x = torch.randn(rows, 256, 8)
    t2 = median_time(lambda: torch.logsumexp(x, dim=2), warmup=True)[0]
    return {"matmul_gflops_float32": 2 * 2048**3 / t / 1e9,
            "logsumexp_child_evals_per_s_float32": x.numel() / t2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--out")
    args = ap.parse_args()
    schema = Schema(tuple(Feature(f"x{i}", "continuous") for i in range(32)))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.rows, 32))
    report = {"cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "rows": args.rows,
              "peak": peaks(args.rows), "circuits": []}
    for reps, sums, inputs in SIZES:
        c = rat_spn(schema, X[:500], depth=3, repetitions=reps, n_sums=sums, n_inputs=inputs, seed=0)
        edges = c.stats()["n_edges"]
        row = {"repetitions": reps, "sums_per_region": sums, "inputs_per_region": inputs, **c.stats()}
        for name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
            cc = CompiledCircuit(c, dtype=dtype)
            for path, fused in (("fused", True), ("plain", False)):
                t = median_time(lambda: chunked(cc, X, fused), warmup=True)[0]
                row[f"{path}_{name}_rows_per_s"] = args.rows / t
                row[f"{path}_{name}_edge_evals_per_s"] = args.rows * edges / t
        row["plain_float32_vs_logsumexp_peak"] = (row["plain_float32_edge_evals_per_s"]
                                                 / report["peak"]["logsumexp_child_evals_per_s_float32"])
        report["circuits"].append(row)
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}),
              flush=True)
    emit(report, args.out)


if __name__ == "__main__":
    main()

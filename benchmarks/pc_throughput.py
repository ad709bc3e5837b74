"""Log-likelihood throughput of compiled circuits from 10^3 to 10^6 edges. Prints JSON.

    .venv/bin/python benchmarks/pc_throughput.py [--rows 20000] [--out FILE]
    .venv/bin/python benchmarks/pc_throughput.py --dense [--rows 2000] [--out FILE]

``--dense``: the dense (tensorized) engine, ``fedpgm.circuits.dense``: edge evaluations/s of
Poon-Domingos circuits over 28 x 28 images (8 pieces) at K = 10, 20, 40 in float32, against the
same run's float32 matmul multiply-adds/s (2048 x 2048, timed before and after the PD circuits;
the faster of the two is the reference, so a busy moment cannot flatter the fraction); and the
dense engine against the layer-by-layer engine below on the same RAT-SPN structure (32
variables, depth 3, 8 repetitions, K units).
Edges are counted as in the equivalent node circuit: per partition K^2 products (2 edges each)
and K sums of K^2 children; per mixing region K sums of its partitions; the root's K.

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
    root = (lambda x: cc.fused_root(x)) if fused else (lambda x: cc.forward(x)[cc.root])
    return np.concatenate([root(cc.tensor(X[s])).numpy() for s in chunks(cc, len(X), fused=fused)])


def peaks(rows: int) -> dict:
    a = torch.randn(2048, 2048)
    t = median_time(lambda: a @ a, warmup=True)[0]
    x = torch.randn(rows, 256, 8)
    t2 = median_time(lambda: torch.logsumexp(x, dim=2), warmup=True)[0]
    return {"matmul_gflops_float32": 2 * 2048**3 / t / 1e9,
            "logsumexp_child_evals_per_s_float32": x.numel() / t2}


def dense_edges(model) -> int:
    k = model.units
    mixing = sum(int(lay.mix_mask.sum()) * k for lay in model.layers if lay.mix.shape[1] > 1)
    return len(model.part_order) * (2 * k * k + k * k * k) + mixing + k


def dense_rate(model, x: torch.Tensor) -> float:
    """Rows/s of the dense forward pass (log-likelihoods of all rows, batches of 500)."""
    def run():
        with torch.no_grad():
            return [model(x[i:i + 500]) for i in range(0, len(x), 500)]
    return len(x) / median_time(run, warmup=True)[0]


def dense_report(rows: int) -> dict:
    from fedpgm.circuits.dense import DenseCircuit
    from fedpgm.circuits.region_graph import binary_trees, poon_domingos

    a = torch.randn(2048, 2048)
    macs = [2048**3 / median_time(lambda: a @ a, repeats=5, warmup=True)[0]]
    report = {"cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "rows": rows, "pd": [], "ratspn": []}
    x = torch.randint(0, 256, (rows, 784)).float()
    for k in (10, 20, 40):
        model = DenseCircuit(poon_domingos((28, 28), 8), k, "gaussian", levels=256)
        rate = dense_rate(model, x)
        edges = dense_edges(model)
        row = {"units": k, "edges": edges, "rows_per_s": rate, "edge_evals_per_s": rate * edges}
        report["pd"].append(row)
        print(json.dumps(row), flush=True)
    macs.append(2048**3 / median_time(lambda: a @ a, repeats=5)[0])
    report["matmul_multiply_adds_per_s_float32"] = max(macs)
    report["matmul_multiply_adds_per_s_float32_before_after"] = macs
    for row in report["pd"]:
        row["fraction_of_matmul"] = row["edge_evals_per_s"] / max(macs)
    schema = Schema(tuple(Feature(f"x{i}", "continuous") for i in range(32)))
    X = np.random.default_rng(0).normal(size=(rows, 32))
    for k in (4, 8, 16):
        node = rat_spn(schema, X[:500], depth=3, repetitions=8, n_sums=k, n_inputs=k, seed=0)
        cc = CompiledCircuit(node, dtype=torch.float32)
        plain = rows / median_time(lambda cc=cc: chunked(cc, X, False), warmup=True)[0]
        fused = rows / median_time(lambda cc=cc: chunked(cc, X, True), warmup=True)[0]
        model = DenseCircuit(binary_trees(32, 3, 8, seed=0), k, "gaussian", None, {"min_var": 1e-2, "max_var": 10.0})
        dense = dense_rate(model, torch.as_tensor(X, dtype=torch.float32))
        row = {"units": k, "node_edges": node.stats()["n_edges"], "dense_edges": dense_edges(model),
               "dense_rows_per_s": dense, "layered_rows_per_s": plain, "fused_rows_per_s": fused,
               "dense_over_layered": dense / plain, "dense_over_fused": dense / fused}
        report["ratspn"].append(row)
        print(json.dumps(row), flush=True)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=None, help="rows evaluated (default 20000; --dense 2000)")
    ap.add_argument("--dense", action="store_true", help="the dense engine (see the module doc)")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.dense:
        emit(dense_report(args.rows or 2000), args.out)
        return
    args.rows = args.rows or 20_000
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
                t = median_time(lambda cc=cc, fused=fused: chunked(cc, X, fused), warmup=True)[0]
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

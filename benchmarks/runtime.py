"""Runtime benchmark: codec throughput and echo round trips on both backends, and private row
alignment (PSI). Prints JSON.

    .venv/bin/python benchmarks/runtime.py [--repeats 5] [--skip-flower] [--out FILE]
    .venv/bin/python benchmarks/runtime.py --psi 10000,100000,1000000 [--out FILE]
    .venv/bin/python benchmarks/runtime.py --secagg 1000,100000 [--repeats 3] [--out FILE]

Targets (issue 3): the in-process backend adds under 1 ms per small message; the codec runs
at over 1 GB/s, close to a memory copy. Medians of ``--repeats`` runs; the machine is shared.
PSI (issue 24): two parties holding N ids each, 80% of them common, in-process (one worker
process per party): wall seconds, bytes through the coordinator and bytes per id.
SecAgg+ (issue 24): three clients on a loopback Flower deployment each add a vector of D values;
per round, seconds and bytes of the secure sum against the same sum sent in the clear, same run
(medians of ``--repeats``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from common import emit, median_time  # noqa: E402  (benchmarks/common.py)
import pandas as pd

from fedpgm.data import load_dataset, partition
from fedpgm.data.partition import ClientData, Partition
from fedpgm.data.schema import ROW_ID, Feature, Schema
from fedpgm.federation import InProcessFederation, Message, align_rows, decode, encode
from fedpgm.federation.deploy import LoopbackDeployment
from fedpgm.federation.diagnostics import roundtrip_benchmark

SIZES = [1_000, 1_000_000, 50_000_000]


def codec(repeats: int) -> dict:
    x = np.random.default_rng(0).normal(size=50_000_000 // 8)
    msg = Message("bench", {"x": x})
    data = encode(msg)
    t_copy = median_time(lambda: x.copy(), repeats)[0]
    t_enc = median_time(lambda: encode(msg), repeats)[0]
    t_dec = median_time(lambda: decode(data), repeats)[0]
    gb = x.nbytes / 1e9
    return {"bytes": x.nbytes, "encode_gb_per_s": gb / t_enc, "decode_gb_per_s": gb / t_dec,
            "memcpy_gb_per_s": gb / t_copy, "encode_vs_memcpy": t_copy / t_enc,
            "decode_vs_memcpy": t_copy / t_dec}


def psi(n: int, overlap: float = 0.8) -> dict:
    """Two parties with ``n`` 12-digit ids each, ``overlap`` of them common: one alignment."""
    rng = np.random.default_rng(n)
    pool = rng.choice(10**12, size=int(n * (2 - overlap)), replace=False)
    common = int(n * overlap)
    held = [pool[:n], np.concatenate([pool[:common], pool[n:]])]
    schema = Schema((Feature("x0", "continuous"), Feature("x1", "continuous")))
    parts = [ClientData(f"client-{i}", schema.select([f"x{i}"]),
                        pd.DataFrame({f"x{i}": np.zeros(len(ids))}, index=pd.Index(ids, name=ROW_ID)))
             for i, ids in enumerate(held)]
    with InProcessFederation(Partition("vertical", schema, parts), "fedpgm.federation.diagnostics:HANDLERS",
                             timeout=3600) as fed:
        report = align_rows(fed)
    assert report["intersection"] == common, report
    return {"ids_per_party": n, "intersection": common, "seconds": report["seconds"],
            "bytes": report["bytes"], "bytes_per_id": report["bytes"] / n, "messages": report["messages"]}


def secagg(dims: list[int], repeats: int) -> list[dict]:
    """Secure against plain sums of three D-value vectors on one loopback deployment."""
    part = partition(load_dataset("wine"), "horizontal", 3, seed=0)
    rng = np.random.default_rng(0)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        part.write(f"{tmp}/parts")
        with LoopbackDeployment(f"{tmp}/parts", workdir=f"{tmp}/dep") as dep:
            for d in dims:
                vectors = {c.client_id: rng.uniform(-1, 1, d).tolist() for c in part.clients}
                res = dep.run("fedpgm.federation.diagnostics:secure_sum_probe",
                              "fedpgm.federation.diagnostics:HANDLERS",
                              {"vectors": vectors, "repeats": repeats}, timeout=580)
                err = float(np.max(np.abs(np.subtract(res["sum"], res["plain_sum"]))))
                secure_s, plain_s = np.median(res["secure_s"]), np.median(res["plain_s"])
                out.append({"values": d, "clients": 3, "secure_s": res["secure_s"], "plain_s": res["plain_s"],
                            "secure_over_plain": secure_s / plain_s, "secure_bytes": res["secure_bytes"],
                            "plain_bytes": res["plain_bytes"], "max_abs_error": err})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-flower", action="store_true")
    ap.add_argument("--psi", help="comma-separated id counts: run only the PSI benchmark")
    ap.add_argument("--secagg", help="comma-separated vector lengths: run only the SecAgg+ benchmark")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.secagg:
        dims = [int(v) for v in args.secagg.split(",")]
        emit({"cores": os.cpu_count(), "repeats": args.repeats, "secagg": secagg(dims, args.repeats)}, args.out)
        return
    if args.psi:
        sizes = [int(v) for v in args.psi.split(",")]
        emit({"cores": os.cpu_count(), "psi": [psi(n) for n in sizes]}, args.out)
        return
    ds = load_dataset("wine")
    part = partition(ds, "horizontal", 2, seed=0)
    report = {"cores": os.cpu_count(), "repeats": args.repeats, "codec": codec(args.repeats),
              "backends": {}}
    for mode in ("sequential", "processes"):
        with InProcessFederation(part, "fedpgm.federation.diagnostics:HANDLERS", mode=mode) as fed:
            roundtrip_benchmark(fed, [1_000], 2)  # warm up
            report["backends"][f"inprocess-{mode}"] = roundtrip_benchmark(fed, SIZES, args.repeats)
    if not args.skip_flower:
        with tempfile.TemporaryDirectory() as tmp:
            part.write(f"{tmp}/parts")
            with LoopbackDeployment(f"{tmp}/parts", workdir=f"{tmp}/dep") as dep:
                t0 = time.perf_counter()
                res = dep.run("fedpgm.federation.diagnostics:roundtrip_benchmark",
                              "fedpgm.federation.diagnostics:HANDLERS",
                              {"sizes": SIZES, "repeats": args.repeats}, timeout=580)
                res["run_wall_s"] = time.perf_counter() - t0
                report["backends"]["flower-loopback"] = res
    emit(report, args.out)


if __name__ == "__main__":
    main()

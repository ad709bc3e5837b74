"""Runtime benchmark: codec throughput and echo round trips on both backends. Prints JSON.

    .venv/bin/python benchmarks/runtime.py [--repeats 5] [--skip-flower] [--out FILE]

Targets (issue 3): the in-process backend adds under 1 ms per small message; the codec runs
at over 1 GB/s, close to a memory copy. Medians of ``--repeats`` runs; the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from common import emit, median_time  # noqa: E402  (benchmarks/common.py)
from fedpgm.data import load_dataset, partition
from fedpgm.federation import InProcessFederation, Message, decode, encode
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-flower", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
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

"""What the privacy audit costs a client: building its patterns once and checking each reply,
against the work the reply took. Prints JSON.

    .venv/bin/python benchmarks/audit_cost.py [--repeats 3] [--out FILE]

Every client audits every reply before it leaves (``fedpgm.data.policy``, ``audit`` on by
default), so the audit must stay small beside the algorithm. Each case runs a real fit with the
clients' audit off, keeps the replies, and times ``PrivacyAudit([client])`` (built once per
client and process) and ``check`` on each reply (medians of ``--repeats``).
"""

from __future__ import annotations

import argparse
import os
import time

from common import emit, median_time  # noqa: E402  (benchmarks/common.py)
from fedpgm.data import load_dataset, partition
from fedpgm.data.policy import ClientPolicy
from fedpgm.federation import InProcessFederation, PrivacyAudit
from fedpgm.fedpc import fit_fedpc

CASES = [  # (dataset, rows, split, clients)
    ("breast_cancer", None, "vertical", 2),
    ("synthetic:mixed", 20_000, "horizontal", 2),
    ("adult", None, "hybrid", 2),
]


def case(name: str, rows: int | None, split: str, k: int, repeats: int) -> dict:
    ds = load_dataset(name, seed=0, rows=rows)
    part = partition(ds, split, k, seed=0)
    for c in part.clients:
        c.policy = ClientPolicy(audit=False)
    replies: list[tuple[str, object]] = []
    t0 = time.perf_counter()
    with InProcessFederation(part, "fedpgm.fedpc.client:HANDLERS", mode="sequential",
                             audit=lambda c, m: replies.append((c, m))) as fed:
        model = fit_fedpc(fed, glue_how="random", clusters=2, seed=0)  # (the settings its results were measured with)
    wall = time.perf_counter() - t0
    out = {"dataset": name, "rows": len(ds.train), "split": split, "clients": k, "fit_wall_seconds": wall,
           "client_fit_seconds": model.info["client_seconds"], "per_client": {}}
    for c in part.clients:
        build, _, audit = median_time(lambda: PrivacyAudit([c]), repeats)
        mine = [m for cid, m in replies if cid == c.client_id]
        check = sum(median_time(lambda m=m: audit.check(c.client_id, m), repeats)[0] for m in mine)
        values = sum(sum(a.size for a in m.arrays.values()) for m in mine)
        out["per_client"][c.client_id] = {
            "build_seconds": build, "check_seconds": check, "replies": len(mine), "reply_values": values,
            "detectors": len(audit.patterns[c.client_id].detectors),
            "audit_vs_fit": (build + check) / max(model.info["client_seconds"][c.client_id], 1e-9)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    report = {"cores": os.cpu_count(), "repeats": args.repeats, "cases": []}
    for name, rows, split, k in CASES:
        try:
            report["cases"].append(case(name, rows, split, k, args.repeats))
        except FileNotFoundError as e:  # adult lives in ../shared/data
            report["cases"].append({"dataset": name, "skipped": str(e)})
    emit(report, args.out)


if __name__ == "__main__":
    main()

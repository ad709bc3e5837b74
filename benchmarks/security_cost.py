"""What the protections against a hostile coordinator cost (docs/security.md): per family, the
run's wall time and bytes with the request contracts and signed PSI on, and with the contract
checks and signature checks switched off in the same process (a measurement only: the library
has no switch for this); and a SecAgg+ secure sum among in-process nodes
(``fedpgm.federation.secagg_local``) behind each client's checks (``secagg_guard``) and with
Flower's mod alone. Prints JSON: medians over ``--repeats`` runs, and the ratio on/off.

    .venv/bin/python benchmarks/security_cost.py --repeats 5 --out results/security_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from contextlib import contextmanager
from unittest import mock

import numpy as np

from fedpgm.data import load_dataset, partition
from fedpgm.federation import InProcessFederation, align_rows
from fedpgm.federation.contract import Contract
from fedpgm.federation.identity import Identity
from fedpgm.federation.reference import federated_moments
from fedpgm.federation.secagg_local import local_federation, local_secure_sum
from fedpgm.fedpc.server import fit_fedpc
from fedpgm.naive_bayes import fit_naive_bayes


@contextmanager
def protections(on: bool):
    if on:
        yield
        return
    with mock.patch.object(Contract, "check", lambda self, name, config, arrays, ctx: config), \
            mock.patch.object(Identity, "verify", lambda self, *a: None):
        yield


def runs(ds):
    """(name, handlers, partition, procedure) of each measured run."""
    label = ds.schema.label
    columns = [n for n in ds.schema.names if n != label]
    horizontal = partition(ds, "horizontal", 3, seed=0)
    overlapping = partition(ds, "vertical", 3, seed=0, overlap=0.8)
    return [
        ("fedpc horizontal x3", "fedpgm.fedpc.client:HANDLERS", horizontal,
         lambda fed: fit_fedpc(fed, params={"min_instances_slice": 50})),
        ("fedpc vertical x3, PSI", "fedpgm.fedpc.client:HANDLERS", overlapping,
         lambda fed: fit_fedpc(fed, align="psi", glue_how="combinatorial", params={"min_instances_slice": 50})),
        ("psi alone x3", "fedpgm.federation.reference:HANDLERS", overlapping, align_rows),
        ("moments x3", "fedpgm.federation.reference:HANDLERS", horizontal, federated_moments),
        ("naive bayes x3", "fedpgm.naive_bayes:HANDLERS", horizontal,
         lambda fed: fit_naive_bayes(fed, label, columns, 2)),
    ]


def measure(name, handlers, part, procedure, on: bool) -> tuple[float, int]:
    with protections(on), InProcessFederation(part, handlers, mode="sequential") as fed:
        t0 = time.perf_counter()
        procedure(fed)
        wall = time.perf_counter() - t0
        totals = fed.ledger.totals()
    return wall, totals["bytes_up"] + totals["bytes_down"]


def measure_secure_sum(clients: int, size: int, on: bool) -> tuple[float, int]:
    """One secure sum of ``size`` values from each of ``clients`` in-process nodes."""
    names = [f"client-{i}" for i in range(clients)]
    vectors = {c: np.random.default_rng(i).uniform(-1, 1, size) for i, c in enumerate(names)}
    fed, _ = local_federation(names, guarded=on)
    t0 = time.perf_counter()
    local_secure_sum(fed, vectors)
    wall = time.perf_counter() - t0
    totals = fed.ledger.totals()
    return wall, totals["bytes_up"] + totals["bytes_down"]


def compare(measure_once, repeats: int) -> dict:
    """Medians of ``measure_once(on)`` -> (wall, bytes) with the protections on and off, and ratios."""
    row = {}
    for on in (True, False):
        walls, sizes = [], []
        for _ in range(repeats):  # interleaved would be fairer; the order is fixed: on, then off
            wall, size = measure_once(on)
            walls.append(wall)
            sizes.append(size)
        row["protected" if on else "unprotected"] = {"wall_s_median": statistics.median(walls), "bytes": sizes[0]}
    row["wall_ratio"] = row["protected"]["wall_s_median"] / row["unprotected"]["wall_s_median"]
    row["bytes_ratio"] = row["protected"]["bytes"] / row["unprotected"]["bytes"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    ds = load_dataset("breast_cancer", seed=0)
    out = {"cores": os.cpu_count(), "repeats": args.repeats, "dataset": "breast_cancer", "runs": {}}
    for name, handlers, part, procedure in runs(ds):
        out["runs"][name] = compare(lambda on: measure(name, handlers, part, procedure, on), args.repeats)
    for clients in (3, 5):
        name = f"secure sum x{clients}, 10,000 values (in-process SecAgg+)"
        out["runs"][name] = compare(lambda on: measure_secure_sum(clients, 10_000, on), args.repeats)
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()

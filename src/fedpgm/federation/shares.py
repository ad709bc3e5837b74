"""Weighted means from a secure sum (``Federation.secure_sum``): what each client adds and how the
server divides, so that the server learns the row-weighted mean of the clients' arrays and
nothing else.

Each client adds its arrays times its share of the rows (``fraction`` = its own rows / the
round's rows, at most 1, which keeps values inside SecAgg+'s range; the client computes it from
its own row count, ``own_fraction``, the server only announces the round's total and cohort)
and, per group of arrays it trained (an F-CM module), that fraction; the server divides each
summed array by its group's summed fraction. With every client active this is FedAvg's weighted
mean; with dropouts, the mean over the survivors; with module-wise training,
the module-wise mean.
"""

from __future__ import annotations

import numpy as np

from fedpgm.data.policy import PolicyRefusal
from fedpgm.federation.contract import Fields, Int

SECURE = Fields({"total_rows": Int(1, 10**12), "cohort": Int(2, 10**6)}, required=("total_rows", "cohort"))


def own_fraction(secure: dict, n_rows: int, ctx) -> float:
    """This client's weight in a secure weighted mean: its own rows over the round's
    ``total_rows``. Refused where the round is smaller than the policy's ``min_cohort`` or its
    total leaves less than ``min_rows`` rows for each other client (the server announcing this
    client's own rows as the total, to read its vector off the sum)."""
    cohort, total, floor = int(secure["cohort"]), int(secure["total_rows"]), ctx.policy.min_rows
    if cohort < ctx.policy.min_cohort:
        raise PolicyRefusal(f"client '{ctx.client_id}' adds to secure sums of at least {ctx.policy.min_cohort} "
                            f"clients (its policy's min_cohort); this round has {cohort}")
    if total < n_rows + (cohort - 1) * floor:
        raise PolicyRefusal(f"client '{ctx.client_id}' refuses a secure round of {total} rows over {cohort} clients: "
                            f"it holds {n_rows} itself, so the others could hold fewer than {floor} each")
    return n_rows / total


def weighted_share(arrays: dict[str, np.ndarray], fraction: float, group_of: dict[str, str],
                   active: set[str]) -> dict[str, np.ndarray]:
    """A client's addend to a secure weighted mean: every array times ``fraction`` (its share of
    the rows), zero where its group (``group_of[name]``) is not in ``active`` (not trained here),
    and ``weight/GROUP`` = ``fraction`` for each active group (0 otherwise)."""
    out = {k: fraction * np.asarray(v, dtype=np.float64) if group_of[k] in active
           else np.zeros(np.shape(v)) for k, v in arrays.items()}
    out.update({f"weight/{g}": np.array([fraction if g in active else 0.0]) for g in sorted(set(group_of.values()))})
    return out


def weighted_mean(sums: dict[str, np.ndarray], group_of: dict[str, str], least: float) -> dict[str, np.ndarray]:
    """From the secure sum of ``weighted_share``s: each array's row-weighted mean over the clients
    whose group was active (float32); arrays whose group weighs less than ``least`` (no survivor
    trained it) are left out."""
    out = {}
    for k, group in group_of.items():
        den = float(sums[f"weight/{group}"][0])
        if den >= least:
            out[k] = (sums[k] / den).astype(np.float32)
    return out


def share_order(names: list[str], group_of: dict[str, str]) -> list[str]:
    """The order of a secure sum of ``weighted_share``s over arrays ``names``."""
    return sorted(names) + [f"weight/{g}" for g in sorted(set(group_of.values()))]


def secure_weighted_mean(fed, name: str, arrays: dict[str, np.ndarray], config: dict, rows: dict[str, int],
                         group_of: dict[str, str]) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """One round of ``name`` whose row-weighted mean of ``arrays`` (per group) the server learns
    by ``fed.secure_sum`` only: each client in ``rows`` (client -> its rows) gets ``config`` plus
    the round's total rows and cohort, and weighs itself (``own_fraction``); returns the mean and
    each survivor's reply config."""
    total = sum(rows.values())
    order = share_order(list(arrays), group_of)
    secure = {"total_rows": total, "cohort": len(rows)}
    requests = {c: (arrays, {**config, "secure": secure}) for c in rows}
    sums, replies = fed.secure_sum(name, order, requests)
    return weighted_mean(dict(zip(order, sums)), group_of, 0.5 * min(rows.values()) / total), replies

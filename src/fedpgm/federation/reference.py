"""The reference algorithm: federated mean and covariance of the columns clients share.

Small enough to check against pandas on the pooled table, and it exercises the whole runtime
(describe, then one statistics round). Each client sends its row count, column means and
centred scatter matrix over complete rows; the server combines them with the pairwise update
of Chan, Golub and LeVeque (exact, and stable where raw sums of squares are not). A client with
fewer than ``min_rows`` complete rows refuses: with one row, its "mean" would be that row.
"""

from __future__ import annotations

import time

import numpy as np

from fedpgm.errors import FedpgmError
from fedpgm.federation.base import Federation
from fedpgm.federation.codec import Message
from fedpgm.federation.contract import NOTHING, Columns, Contract, Int
from fedpgm.federation.handlers import ClientContext, HandlerSet

HANDLERS = HandlerSet("moments")


@HANDLERS.query("describe", NOTHING)
def describe(request: Message, ctx: ClientContext) -> Message:
    """Column names and row count: never data."""
    return Message("describe", config={"columns": ctx.data.columns, "n_rows": len(ctx.data.train)})


@HANDLERS.query("moments", Contract({"columns": Columns(), "min_rows": Int(1, 10**9)}, required=("columns",)))
def moments(request: Message, ctx: ClientContext) -> Message:
    """Row count, mean and scatter of ``columns`` over this client's complete rows: rows with no
    missing value in any of its columns, a set fixed whatever the request names (so no choice of
    columns can single rows out by their missing values)."""
    cols = list(request.config["columns"])
    complete = ctx.data.train.notna().all(axis=1).to_numpy()
    x = ctx.data.train[cols].to_numpy(dtype=float)[complete]
    min_rows = max(int(request.config.get("min_rows", 5)), ctx.policy.min_rows)
    if len(x) < min_rows:
        raise FedpgmError(f"only {len(x)} complete rows (< min_rows={min_rows}); statistics of so "
                          "few rows would reveal them")
    mean = x.mean(axis=0)
    centred = x - mean
    return Message("moments", {"n": np.array([len(x)]), "mean": mean, "scatter": centred.T @ centred})


def combine(parts: list[tuple[int, np.ndarray, np.ndarray]]) -> tuple[int, np.ndarray, np.ndarray]:
    """Merge (n, mean, scatter) triples exactly (pairwise update)."""
    n, mean, scatter = parts[0]
    for nb, mb, sb in parts[1:]:
        delta = mb - mean
        total = n + nb
        scatter = scatter + sb + np.outer(delta, delta) * n * nb / total
        mean = mean + delta * nb / total
        n = total
    return n, mean, scatter


def federated_moments(fed: Federation, columns: list[str] | None = None, min_rows: int = 5,
                      pause_s: float = 0.0) -> dict:
    """Mean and sample covariance of ``columns`` (default: those every client holds).

    Clients that fail are reported under ``failed`` and left out; the result covers the rest.
    ``pause_s`` waits between the two rounds (for failure drills that stop a client there).
    """
    described = fed.broadcast("describe")
    fed.log(f"describe: {len(described.messages)} replies, {len(described.failures)} failures")
    time.sleep(pause_s)
    failed = {c: str(f) for c, f in described.failures.items()}
    held = {c: m.config["columns"] for c, m in described.messages.items()}
    if not held:
        raise FedpgmError(f"no client answered 'describe': {failed}")
    if columns is None:
        first = next(iter(held.values()))
        columns = [c for c in first if all(c in cols for cols in held.values())]
    holders = [c for c, cols in held.items() if all(col in cols for col in columns)]
    if not columns or not holders:
        raise FedpgmError("no column is held by every answering client; pass columns explicitly")
    replies = fed.broadcast("moments", config={"columns": columns, "min_rows": min_rows},
                            clients=holders)
    failed.update({c: str(f) for c, f in replies.failures.items()})
    ok = sorted(replies.messages)
    if not ok:
        raise FedpgmError(f"every client failed: {failed}")
    parts = [(int(replies.messages[c]["n"][0]), replies.messages[c]["mean"],
              replies.messages[c]["scatter"]) for c in ok]
    n, mean, scatter = combine(parts)
    cov = scatter / (n - 1) if n > 1 else np.full_like(scatter, np.nan)
    return {"columns": list(columns), "n": n, "mean": mean.tolist(), "cov": cov.tolist(),
            "clients": ok, "failed": failed, "communication": fed.ledger.totals()}

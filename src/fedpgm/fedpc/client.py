"""FedPC client handlers: describe the columns held, then learn the local circuits once.

``fit`` receives the subspaces this client shares with others (one LearnSPN each, on all its
rows) and its single-client subspace (its rows clustered by k-means on those columns only,
one LearnSPN per cluster). Replies carry circuits as payloads (structure JSON in the config,
packed parameters as arrays) and row counts; never rows.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans

from fedpgm.circuits.estimator import LearnSPN
from fedpgm.circuits.io import to_payload
from fedpgm.errors import FedpgmError
from fedpgm.federation.codec import Message
from fedpgm.federation.handlers import ClientContext, HandlerSet

HANDLERS = HandlerSet("fedpc")


@HANDLERS.query("describe")
def describe(request: Message, ctx: ClientContext) -> Message:
    """The schema of the columns held and the number of training rows."""
    return Message("describe", config={"schema": ctx.data.schema.to_dict(), "n_rows": len(ctx.data.train)})


def learn(ctx: ClientContext, names: list[str], rows: np.ndarray, learner: dict):
    schema = ctx.data.schema.select(names)
    frame = ctx.data.train.iloc[rows][schema.names]
    return LearnSPN(**learner).fit(frame, schema).circuit_


def clusters_of(ctx: ClientContext, names: list[str], k: int, seed: int) -> np.ndarray:
    """k-means labels of the client's rows on its own columns (standardised, NaN -> mean)."""
    x = ctx.data.train[names].to_numpy(dtype=float)
    if k > len(x):
        raise FedpgmError(f"{k} clusters requested but client '{ctx.client_id}' has {len(x)} rows; "
                          "lower --clusters")
    if k == 1:
        return np.zeros(len(x), dtype=int)
    x = np.where(np.isnan(x), np.nanmean(x, axis=0), x)
    sd = x.std(axis=0)
    x = (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    return KMeans(n_clusters=k, n_init=3, random_state=seed).fit_predict(x)


@HANDLERS.train("fit")
def fit(request: Message, ctx: ClientContext) -> Message:
    cfg = request.config
    learner = dict(cfg["learner"])
    arrays, entries = {}, []

    def add(kind: str, index: int, circuit, n: int) -> None:
        doc, tensors = to_payload(circuit)
        prefix = f"{kind}{index}/"
        arrays.update({prefix + k: v for k, v in tensors.items()})
        entries.append({"kind": kind, "index": index, "n": n, "prefix": prefix, "doc": doc})

    everything = np.arange(len(ctx.data.train))
    for i, names in enumerate(cfg["shared"]):
        add("shared", i, learn(ctx, names, everything, learner), len(everything))
    if cfg["own"]:
        labels = clusters_of(ctx, cfg["own"], int(cfg["clusters"]), int(learner.get("seed", 0)))
        for c in range(int(cfg["clusters"])):
            rows = np.flatnonzero(labels == c)
            if len(rows) == 0:
                raise FedpgmError(f"cluster {c} of client '{ctx.client_id}' is empty; lower --clusters")
            add("cluster", c, learn(ctx, cfg["own"], rows, learner), len(rows))
    return Message("fit", arrays, {"circuits": entries})

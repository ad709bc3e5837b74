"""FedNGM client handlers. Replies carry graphs, models and metrics, never rows.

Each handler refuses a client with fewer training rows than its policy's ``min_rows`` (and
``stitch`` a target with fewer known test rows), and every quantile a model carries is a mean
of at least ``min_rows`` values (``fedpgm.ngm.layout.block_quantiles``).

- ``describe``: the schema of the columns held and the number of training rows.
- ``graph``: the client's dependency graph over all its columns (edge list), recovered from
  its own rows (``method`` glasso/bn/ngr, ``sparsity``).
- ``graph_votes``: the same graph as one 0/1 vote per pair of the server's ``columns`` (i < j,
  row-major upper triangle), for a secure sum: the server learns how many clients hold each
  edge, never which (``fit_fedngm(..., secure_aggregation=True)``).
- ``fit``: an NGM on the ``columns`` the server names, under the merged graph ``edges``; kept
  under the work folder and sent (weights as arrays, the JSON document in the config) so the
  server can sample from it.
- ``release``: the global model, kept under the work folder.
- ``stitch``: the released global model widened for this client's extra columns, trained on
  its rows, kept; the reply holds the metrics of the global and the stitched model on this
  client's test rows for the requested ``targets``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict

import numpy as np

from fedpgm.errors import FedpgmError
from fedpgm.federation.codec import Message
from fedpgm.federation.contract import (NOTHING, Array, Choice, Columns, Contract, Doc, Fields, Flag, Float, Int,
                                        ListOf, Text)
from fedpgm.federation.handlers import ClientContext, HandlerSet
from fedpgm.ngm.graph import GRAPH_METHODS
from fedpgm.ngm.graph import adjacency, from_edges, recover_graph, to_edges
from fedpgm.ngm.metrics import target_metrics
from fedpgm.ngm.model import NGM, NGMSettings
from fedpgm.ngm.stitch import stitch as stitch_model

HANDLERS = HandlerSet("ngm")
FOLDER = "ngm"

# What a server may ask of an NGM client, bounded (sizes, epochs) so no request buys unbounded work.
SETTINGS = Fields({"hidden": Int(1, 4096), "layers": Int(1, 16), "lam": Float(0.0, 1e3), "lr": Float(1e-6, 1.0),
                   "epochs": Int(1, 10_000), "batch_size": Int(1, 1 << 20), "patience": Int(1, 10_000),
                   "val_fraction": Float(0.01, 0.5), "revealer": Flag(), "sparsity": Float(0.01, 1.0),
                   "seed": Int(0, 2**32 - 1)})
GRAPH = {"method": Choice(*GRAPH_METHODS), "sparsity": Float(0.01, 1.0)}
EDGES = ListOf(ListOf(Text(), 2), 1 << 20)


def model_message(name: str, model: NGM, **config) -> Message:
    doc, arrays = model.to_payload()
    return Message(name, arrays, {"model": doc, **config})


def model_of(message: Message, where: str) -> NGM:
    """The NGM a message carries (its document in the config, its weights as arrays), checked."""
    doc = message.config.get("model")
    if not isinstance(doc, dict):
        raise FedpgmError(f"{where} carries no NGM document")
    return NGM.from_payload(doc, dict(message.arrays), where)


@HANDLERS.query("describe", NOTHING)
def describe(request: Message, ctx: ClientContext) -> Message:
    ctx.require_rows(len(ctx.data.train), "a row count")
    return Message("describe", config={"schema": ctx.data.schema.to_dict(), "n_rows": len(ctx.data.train)})


def own_graph(request: Message, ctx: ClientContext):
    """The client's graph from its own rows (kept in its state)."""
    ctx.require_rows(len(ctx.data.train), "a graph")
    cfg = request.config
    G = recover_graph(ctx.data.train, ctx.data.schema.with_label(None), cfg.get("method", "glasso"),
                      float(cfg.get("sparsity", 0.25)))
    ctx.state["edges"] = to_edges(G)
    return G


@HANDLERS.query("graph", Contract(GRAPH))
def graph(request: Message, ctx: ClientContext) -> Message:
    t0 = time.process_time()
    G = own_graph(request, ctx)
    return Message("graph", config={"edges": to_edges(G), "seconds": time.process_time() - t0})


@HANDLERS.train("graph_votes", Contract({**GRAPH, "columns": Columns()}, required=("columns",),
                                           update=True))
def graph_votes(request: Message, ctx: ClientContext) -> Message:
    columns = list(request.config["columns"])
    missing = [c for c in columns if c not in ctx.data.schema.names]
    if missing:
        raise FedpgmError(f"client '{ctx.client_id}' holds no column(s) {missing}")
    A = adjacency(own_graph(request, ctx), columns)
    upper = np.triu_indices(len(columns), 1)
    return Message("graph_votes", {"votes": A[upper].astype(np.float64)})


@HANDLERS.train("fit", Contract({"columns": Columns(), "edges": EDGES, "settings": SETTINGS},
                                   required=("columns",)))
def fit(request: Message, ctx: ClientContext) -> Message:
    ctx.require_rows(len(ctx.data.train), "an NGM")
    cfg = request.config
    columns = list(cfg["columns"])
    schema = ctx.data.schema.with_label(None).select(columns)
    settings = NGMSettings.from_dict(cfg.get("settings", {}))
    G = None if settings.revealer else from_edges(columns, cfg["edges"])
    t0 = time.process_time()
    model = NGM.fit(ctx.data.train[schema.names], schema, G, settings, min_rows=ctx.policy.min_rows)
    model.save(ctx.workdir / FOLDER / "local")
    return model_message("fit", model, n_rows=len(ctx.data.train), seconds=time.process_time() - t0,
                         epochs=len(model.history))


@HANDLERS.train("release", Contract({"model": Doc()}, required=("model",), arrays={"*": Array("fiu")}))
def release(request: Message, ctx: ClientContext) -> Message:
    model_of(request, "released model").save(ctx.workdir / FOLDER / "global")
    return Message("release", config={"kept": True})


@HANDLERS.train("stitch", Contract({"settings": SETTINGS, "targets": ListOf(Text())}))
def stitch(request: Message, ctx: ClientContext) -> Message:
    ctx.require_rows(len(ctx.data.train), "a stitched model")
    test = ctx.data.test
    known = {} if test is None else {t: int(test[t].notna().sum()) for t in request.config.get("targets", [])
                                     if t in test.columns}  # each metric averages these test rows
    for target, n in known.items():
        ctx.require_rows(n, f"metrics of '{target}'")
    folder = ctx.workdir / FOLDER / "global"
    if not folder.is_dir():
        raise FedpgmError("no released global model to stitch; the server must release one first")
    model = NGM.load(folder)
    cfg = request.config
    settings = NGMSettings.from_dict({**asdict(model.settings), **cfg.get("settings", {})})
    edges = from_edges(ctx.data.schema.names, ctx.state.get("edges", []))
    t0 = time.process_time()
    data = ctx.data.train.drop(columns=[c for c in ctx.data.train.columns if c not in ctx.data.schema])
    stitched = stitch_model(model, data, ctx.data.schema.with_label(None), edges, settings,
                            min_rows=ctx.policy.min_rows)
    stitched.save(ctx.workdir / FOLDER / "stitched")
    seconds = time.process_time() - t0
    metrics = {}
    for target in known:
        if test is None or target not in model.schema:
            continue
        metrics[target] = {"global": target_metrics(model, test, target),
                           "stitched": target_metrics(stitched, test, target)}
    extra = [n for n in stitched.names if n not in model.schema]
    return Message("stitch", config={"extra": extra, "metrics": json.loads(json.dumps(metrics)),
                                     "seconds": seconds})

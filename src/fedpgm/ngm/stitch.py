"""Stitching: personalise a global NGM with a client's extra features.

The global network's input, hidden and output layers are widened. Every layer keeps the
global block (frozen); the new hidden units come in groups, ``units_per_feature`` per feature
of the widened model, and a group owned by feature j reads only j's neighbours in the stitched
graph (the global graph plus the client's edges to its extra features), feeds only its own
group in the next layer and only j's output columns. The new paths therefore follow the graph
by construction (the path-norm penalty would be constant and is dropped), and every other new
block is a fixed zero: new inputs never reach the global units, global units never reach the
extra outputs. The group-to-output weights of the global features start at zero, so the
stitched model starts as the global one; the client's rows then train only the new groups
(a graph-respecting residual per feature, which also absorbs the client's shift from the
global distribution) and the extra features' outputs.

Why groups and not a dense widening: dense new units read every input, so any weight into a
global output creates off-graph paths, and the log path-norm penalty (the global model sits at
an off-graph share of ~1e-4) pinned those weights at zero: stitching then barely moved the
global predictions (Adult: better in 16-19 of 27 client x target x seed cells; 23-26 now).
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pandas as pd
import torch

from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.ngm.graph import adjacency
from fedpgm.ngm.layout import MIN_ROWS, Layout
from fedpgm.ngm.model import NGM
from fedpgm.ngm.train import NGMSettings, Objective, train, validation_rows
from fedpgm.ngm.network import NGMNet


class BestPerFeature:
    """``after_epoch`` for ``train``: each feature's validation loss when predicted from all the
    other features, and, per feature, the new weights at its best epoch, the untrained state (the
    global model's outputs) included. A feature's group of new units feeds only its own output,
    so the best state of each feature can be put together exactly. ``owner``: from ``widen``."""

    def __init__(self, objective: Objective, X: np.ndarray, seen: np.ndarray, rows: np.ndarray,
                 owner: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.objective, self.owner = objective, owner
        self.X = torch.as_tensor(X[rows])
        self.seen = torch.as_tensor(seen[rows], dtype=torch.float32)
        F = len(objective.layout.schema)
        self.best = np.full(F, np.inf)
        self.state: list[list[tuple[torch.Tensor, torch.Tensor]] | None] = [None] * F

    def __call__(self, net: NGMNet) -> None:
        layout = self.objective.layout
        means = torch.as_tensor(layout.means())
        losses = torch.zeros(len(layout.schema))
        with torch.no_grad():
            for j, b in enumerate(layout.blocks):
                inputs = self.X.clone()
                inputs[:, b] = means[b]
                scored = torch.zeros_like(self.seen)
                scored[:, j] = self.seen[:, j]
                feature_loss = self.objective.feature_losses(net(inputs), self.X, scored)[:, j]
                losses[j] = feature_loss.sum() / scored[:, j].sum().clamp(min=1)
        for j, loss in enumerate(losses.numpy()):
            if loss < self.best[j]:
                self.best[j] = loss
                self.state[j] = [(w.detach().clone(), b.detach().clone()) for w, b in zip(net.weights, net.biases)]

    def restore(self, net: NGMNet) -> None:
        """Every feature's new weights from its own best epoch."""
        with torch.no_grad():
            for l, (w, b) in enumerate(zip(net.weights, net.biases)):
                ow, ob = self.owner[l]
                for j, state in enumerate(self.state):
                    if state is None:  # (a feature with no best epoch yet keeps its weights)
                        continue
                    mw, mb = torch.as_tensor(ow == j), torch.as_tensor(ob == j)
                    w[mw] = state[l][0][mw]
                    b[mb] = state[l][1][mb]


def widen(net: NGMNet, layout: Layout, graph: nx.Graph,
          units_per_feature: int, seed: int) -> tuple[NGMNet, list[tuple[np.ndarray, np.ndarray]]]:
    """``net`` (over the first columns of ``layout``) widened to all of ``layout``'s columns,
    with ``units_per_feature`` new units per feature in each hidden layer, owned as the module
    doc says; global weights copied and frozen, structural zeros frozen. Also returns, per
    layer, the feature each weight (out, in) and bias (out,) trains for (-1: frozen)."""
    n_layers = len(net.weights)
    if n_layers < 2:
        raise FedpgmError("stitching needs an NGM with at least one hidden layer")
    col_feature = layout.membership().argmax(0)  # (D',) the feature of each column
    unit = np.repeat(np.arange(len(layout.schema)), units_per_feature)  # the feature of each new unit
    reads = adjacency(graph, layout.schema.names)  # (F, F) j's units may read feature i
    old = net.widths
    wide = NGMNet([layout.width] + [w + len(unit) for w in old[1:-1]] + [layout.width], seed=seed)
    owners = []
    with torch.no_grad():
        for l, (w, b) in enumerate(zip(net.weights, net.biases)):
            o, i = w.shape
            W, B = wide.weights[l], wide.biases[l]
            last = l == n_layers - 1
            row_owner = np.concatenate([np.full(o, -1), col_feature[o:] if last else unit])  # (out,)
            if l == 0:  # columns -> new units: from the owner's neighbours
                owner = np.where(reads[row_owner.clip(0)][:, col_feature] > 0, row_owner[:, None], -1)
            elif not last:  # new units -> new units of the same owner
                col_owner = np.concatenate([np.full(i, -1), unit])
                owner = np.where(row_owner[:, None] == col_owner[None, :], row_owner[:, None], -1)
            else:  # new units -> their owner's output columns
                col_owner = np.concatenate([np.full(i, -1), unit])
                owner = np.where(col_feature[:, None] == col_owner[None, :], col_owner[None, :], -1)
            T = torch.as_tensor(owner >= 0, dtype=W.dtype)
            W.mul_(T)
            if last:
                W[:o, i:] = 0.0  # the global outputs start unchanged
            W[:o, :i] = w
            B[:o] = b
            owners.append((owner, row_owner))
    wide.freeze([torch.as_tensor(own < 0, dtype=W.dtype) for own, _ in owners],
                [torch.as_tensor(own < 0, dtype=W.dtype) for _, own in owners])
    return wide, owners


def stitch(model: NGM, frame: pd.DataFrame, schema: Schema, edges: nx.Graph,
           settings: NGMSettings | None = None, units_per_feature: int = 16,
           min_rows: int = MIN_ROWS) -> NGM:
    """The global ``model`` widened for ``schema``'s features it lacks and trained on ``frame``.

    ``edges`` holds the client's graph; its edges touching an extra feature join the global
    graph. The global features keep the global encoding (its statistics). ``min_rows``: the
    fewest rows behind each new quantile (the client's policy; see ``Layout.fit``).
    """
    settings = settings or model.settings
    extra = [f for f in schema.features if f.name not in model.schema]
    if not extra:
        raise FedpgmError("the client has no feature the global model lacks; nothing to stitch")
    missing = [n for n in model.names if n not in frame.columns]
    if missing:
        raise FedpgmError(f"the client lacks global feature(s) {missing}; stitching needs them all")
    full = Schema(model.schema.features + tuple(extra))
    extra_layout = Layout.fit(frame, Schema(tuple(extra)), min_rows)
    layout = Layout(full, {**model.layout.stats, **extra_layout.stats})
    graph = nx.Graph(model.graph)
    names = {f.name for f in extra}
    graph.add_nodes_from(names)
    graph.add_edges_from((a, b) for a, b in edges.edges()
                         if (a in names or b in names) and a in full and b in full and a != b)
    net, owners = widen(model.net, layout, graph, units_per_feature, settings.seed)
    X, seen = layout.encode(frame)
    objective = Objective(layout, graph, False, 0.0)
    best = BestPerFeature(objective, X, seen, validation_rows(len(X), settings), owners)
    history = train(net, objective, X, seen, settings, after_epoch=best)
    best.restore(net)
    out = NGM(layout, graph, net, settings, history=history)
    out.residuals = out.residual_quantiles(X, seen, min_rows)
    return out

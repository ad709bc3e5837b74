"""Stitching: personalise a global NGM with a client's extra features.

The global network's input, hidden and output layers are widened: layer l becomes
``[[W_g (frozen), A], [B, C]]`` where rows are outputs (old units first) and columns inputs.
``A`` (new inputs into old units) starts at zero, so at initialisation the old outputs are
exactly the global model's; ``B`` and ``C`` start small and random. Only ``A``, ``B``, ``C`` and
the new units' biases train, on the client's rows, under the global graph plus the client's
edges to its extra features.
"""

from __future__ import annotations

import networkx as nx
import pandas as pd
import torch

from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.ngm.layout import Layout
from fedpgm.ngm.model import NGM, NGMSettings, Objective, train
from fedpgm.ngm.network import NGMNet


def widen(net: NGMNet, extra_in: int, extra_hidden: int, seed: int) -> NGMNet:
    """``net`` with ``extra_in`` more inputs/outputs and ``extra_hidden`` more units per hidden
    layer; old weights copied and frozen, new-to-old blocks zero, the rest small random."""
    old = net.widths
    new = [old[0] + extra_in] + [w + extra_hidden for w in old[1:-1]] + [old[-1] + extra_in]
    wide = NGMNet(new, seed=seed)
    frozen, frozen_bias = [], []
    with torch.no_grad():
        for l, (w, b) in enumerate(zip(net.weights, net.biases)):
            o, i = w.shape
            W, B = wide.weights[l], wide.biases[l]
            W.mul_(0.1)  # small random B and C
            W[:o, :i] = w
            W[:o, i:] = 0.0  # new inputs into old units: zero, so old outputs are unchanged
            B[:o] = b
            m = torch.zeros_like(W)
            m[:o, :i] = 1.0
            mb = torch.zeros_like(B)
            mb[:o] = 1.0
            frozen.append(m)
            frozen_bias.append(mb)
    wide.freeze(frozen, frozen_bias)
    return wide


def stitch(model: NGM, frame: pd.DataFrame, schema: Schema, edges: nx.Graph,
           settings: NGMSettings | None = None, extra_hidden: int = 32) -> NGM:
    """The global ``model`` widened for ``schema``'s features it lacks and trained on ``frame``.

    ``edges`` holds the client's graph; its edges touching an extra feature join the global
    graph. The global features keep the global encoding (its statistics).
    """
    settings = settings or model.settings
    extra = [f for f in schema.features if f.name not in model.schema]
    if not extra:
        raise FedpgmError("the client has no feature the global model lacks; nothing to stitch")
    missing = [n for n in model.names if n not in frame.columns]
    if missing:
        raise FedpgmError(f"the client lacks global feature(s) {missing}; stitching needs them all")
    full = Schema(model.schema.features + tuple(extra))
    extra_layout = Layout.fit(frame, Schema(tuple(extra)))
    layout = Layout(full, {**model.layout.stats, **extra_layout.stats})
    graph = nx.Graph(model.graph)
    names = {f.name for f in extra}
    graph.add_nodes_from(names)
    graph.add_edges_from((a, b) for a, b in edges.edges()
                         if (a in names or b in names) and a in full and b in full and a != b)
    net = widen(model.net, extra_layout.width, extra_hidden, settings.seed)
    X, seen = layout.encode(frame)
    history = train(net, Objective(layout, graph, False, settings.lam), X, seen, settings)
    out = NGM(layout, graph, net, settings, history=history)
    out.residuals = out.residual_quantiles(X, seen)
    return out

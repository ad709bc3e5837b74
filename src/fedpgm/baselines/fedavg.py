"""FedAvg (McMahan et al. 2017) of an MLP classifier over a horizontal federation.

Round 0 gathers per-column moments for standardisation; each later round sends the global
weights to every client, which trains ``epochs`` local epochs (Adam, mini-batches) and replies
with its weights and row count; the server averages them weighted by rows.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from fedpgm.baselines.tabular import STATS, encode, get_weights, local_moments, merge_moments, network, set_weights
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.base import Federation
from fedpgm.federation.codec import Message
from fedpgm.federation.contract import NOTHING, Array, Choice, Contract, Float, Int
from fedpgm.federation.handlers import ClientContext, HandlerSet

HANDLERS = HandlerSet("fedavg")
TRAIN = Contract({"stats": STATS, "epochs": Int(1, 1000), "lr": Float(1e-7, 10.0), "batch_size": Int(1, 1 << 20),
                  "hidden": Int(1, 4096), "layers": Int(1, 16), "arch": Choice("mlp", "tabnet"),
                  "seed": Int(0, 2**63 - 1)},
                 required=("stats", "epochs", "lr", "batch_size", "hidden", "layers", "arch", "seed"),
                 arrays={"*": Array("f")}, update=True, sent_model=True)


@HANDLERS.query("describe", NOTHING)
def describe(request: Message, ctx: ClientContext) -> Message:
    return Message("describe", config={"schema": ctx.data.schema.to_dict(), "n_rows": len(ctx.data.train),
                                       "moments": local_moments(ctx.data.train, ctx.data.schema)})


@HANDLERS.train("train", TRAIN)
def train(request: Message, ctx: ClientContext) -> Message:
    cfg = request.config
    schema = ctx.data.schema
    if schema.label is None:
        raise FedpgmError(f"client '{ctx.client_id}' holds no label; FedAvg needs labelled rows")
    x = torch.from_numpy(encode(ctx.data.train, schema, {k: tuple(v) for k, v in cfg["stats"].items()}))
    y = torch.from_numpy(ctx.data.train[schema.label].to_numpy(dtype=np.int64))
    model = network(cfg["arch"], x.shape[1], schema[schema.label].cardinality, cfg["hidden"], cfg["layers"])
    set_weights(model, request.arrays)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    gen = torch.Generator().manual_seed(int(cfg["seed"]))
    start = time.process_time()
    for _ in range(int(cfg["epochs"])):
        for idx in torch.randperm(len(x), generator=gen).split(int(cfg["batch_size"])):
            if len(idx) < 2:  # batch norm (TabNet) needs two rows
                continue
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    reply = {"n": len(x), "seconds": time.process_time() - start}
    return Message("train", get_weights(model), reply)


def fedavg(fed: Federation, rounds: int = 100, epochs: int = 1, lr: float = 1e-3, batch_size: int = 64,
           hidden: int = 64, layers: int = 2, seed: int = 0, arch: str = "mlp") -> dict:
    """Train ``arch`` (``mlp`` or ``tabnet``, see ``tabular.network``); returns {"model",
    "schema", "stats", "critical_path_seconds", "communication"}."""
    if rounds < 1 or epochs < 1:
        raise FedpgmError(f"rounds and epochs must be >= 1, got {rounds} and {epochs}")
    described = fed.broadcast("describe").require_all()
    schemas = [Schema.from_dict(m.config["schema"]) for m in described.values()]
    schema = schemas[0]
    if any(s.names != schema.names for s in schemas) or schema.label is None:
        raise FedpgmError("FedAvg needs a horizontal federation: every client with the same columns and the label")
    stats = merge_moments([m.config["moments"] for m in described.values()])
    torch.manual_seed(seed)
    width = encode(_empty(schema), schema, stats).shape[1]
    model = network(arch, width, schema[schema.label].cardinality, hidden, layers)
    cfg = {"stats": stats, "epochs": epochs, "lr": lr, "batch_size": batch_size, "hidden": hidden,
           "layers": layers, "arch": arch}
    critical = 0.0
    for r in range(rounds):
        round_cfg = {**cfg, "seed": seed * 100_003 + r}
        replies = fed.broadcast("train", get_weights(model), round_cfg).require_all()
        n = np.array([m.config["n"] for m in replies.values()], dtype=float)
        avg = {k: sum(w * m.arrays[k] for w, m in zip(n / n.sum(), replies.values()))
               for k in next(iter(replies.values())).arrays}
        seconds = [m.config["seconds"] for m in replies.values()]
        set_weights(model, {k: v.astype(np.float32) for k, v in avg.items()})
        critical += max(seconds)
    return {"model": model, "schema": schema, "stats": stats, "critical_path_seconds": critical,
            "communication": fed.ledger.totals()}


def _empty(schema: Schema):
    import pandas as pd

    return pd.DataFrame({n: np.zeros(0) for n in schema.names})


def predict_proba(result: dict, frame) -> np.ndarray:
    """(rows, classes) class probabilities of a trained FedAvg/centralized MLP."""
    x = torch.from_numpy(encode(frame, result["schema"], result["stats"]))
    result["model"].eval()
    with torch.no_grad():
        return torch.softmax(result["model"](x), dim=1).numpy()

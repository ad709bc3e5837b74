"""SplitNN (Vepakomma et al. 2018; Ceballos et al. 2020) over a vertical federation.

Each client keeps a bottom MLP on its own columns; the server (the active party, which receives
the label column from the client holding it) keeps the top MLP over the concatenated client
embeddings. Per mini-batch: ``forward`` (the server names the batch by row positions in row-id
order; clients reply with embeddings), the server's top step, then ``backward`` (each client
receives the gradient of its embeddings and takes an SGD-with-momentum step). Bottom weights and
momentum live in the client state as arrays, so every backend can keep them.

SplitNN sends per-row values by design (the label column to the active party; an embedding of
each row the server names), so no ``min_rows`` floor can hold: it is a baseline, and a client
serves it only where its policy names it (``families``; ``opt_in``).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace

import numpy as np
import torch
from torch import nn

from fedpgm.baselines.tabular import STATS, encode, local_moments, merge_moments, mlp, network
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.base import Federation
from fedpgm.federation.codec import Message
from fedpgm.data.partition import Partition
from fedpgm.data.policy import FAMILIES
from fedpgm.federation.contract import NOTHING, Array, Choice, Contract, Float, Int
from fedpgm.federation.handlers import ClientContext, HandlerSet

HANDLERS = HandlerSet("splitnn")


def ordered(frame):
    return frame.sort_index()


NETWORK = {"stats": STATS, "hidden": Int(1, 4096), "embedding": Int(1, 4096), "seed": Int(0, 2**63 - 1),
           "arch": Choice("mlp", "tabnet")}
FORWARD = Contract({**NETWORK, "lr": Float(0.0, 10.0), "momentum": Float(0.0, 1.0), "split": Choice("train", "test")},
                   required=tuple(NETWORK), arrays={"rows": Array("iu")})
BACKWARD = Contract({**NETWORK, "lr": Float(0.0, 10.0), "momentum": Float(0.0, 1.0)},
                    required=(*NETWORK, "lr", "momentum"), arrays={"rows": Array("iu"), "grad": Array("f")})


def opt_in(part: Partition) -> Partition:
    """``part`` with every client's policy also serving SplitNN (for a run whose parties agreed to
    it: the label column and per-row embeddings leave them)."""
    for c in part.clients:
        families = c.policy.families or tuple(f for f in FAMILIES if f != "splitnn")
        c.policy = replace(c.policy, families=tuple(dict.fromkeys((*families, "splitnn"))))
    return part


@HANDLERS.query("describe", NOTHING)
def describe(request: Message, ctx: ClientContext) -> Message:
    ids = "\n".join(map(str, ordered(ctx.data.train).index))
    return Message("describe", config={"schema": ctx.data.schema.to_dict(), "n_rows": len(ctx.data.train),
                                       "moments": local_moments(ctx.data.train, ctx.data.schema),
                                       "ids_digest": hashlib.sha256(ids.encode()).hexdigest()})


@HANDLERS.query("labels", NOTHING)
def labels(request: Message, ctx: ClientContext) -> Message:
    """The label column in row-id order (what the active party needs), train and test."""
    name = ctx.data.schema.label
    out = {"train": ordered(ctx.data.train)[name].to_numpy(dtype=np.int64)}
    if ctx.data.test is not None:
        out["test"] = ordered(ctx.data.test)[name].to_numpy(dtype=np.int64)
    return Message("labels", out)


def bottom(ctx: ClientContext, cfg: dict) -> nn.Module:
    width = inputs(ctx, cfg, "train").shape[1]
    torch.manual_seed(int(cfg["seed"]))
    model = network(cfg["arch"], width, cfg["embedding"], cfg["hidden"], 1)
    keys = [k for k in ctx.state if k.startswith("bottom/")]
    if keys:
        model.load_state_dict({k[7:]: torch.from_numpy(ctx.state[k]) for k in keys})
    return model


def inputs(ctx: ClientContext, cfg: dict, split: str) -> torch.Tensor:
    """(rows, width) encoded ``split`` rows in row-id order, encoded once per run (``ctx.memo``)."""
    def compute() -> torch.Tensor:
        frame = ordered(getattr(ctx.data, split))
        return torch.from_numpy(encode(frame, ctx.data.schema, {k: tuple(v) for k, v in cfg["stats"].items()}))
    return ctx.memo(f"splitnn/{split}/{json.dumps(cfg['stats'], sort_keys=True)}", compute)


@HANDLERS.train("forward", FORWARD)
def forward(request: Message, ctx: ClientContext) -> Message:
    cfg = request.config
    split = cfg.get("split", "train")
    x = inputs(ctx, cfg, split)
    rows = request.arrays.get("rows")
    model = bottom(ctx, cfg).train(split == "train")
    with torch.no_grad():
        emb = model(x if rows is None else x[torch.from_numpy(rows)])
    return Message("forward", {"embedding": emb.numpy()})


@HANDLERS.train("backward", BACKWARD)
def backward(request: Message, ctx: ClientContext) -> Message:
    cfg = request.config
    start = time.process_time()
    model = bottom(ctx, cfg)
    x = inputs(ctx, cfg, "train")[torch.from_numpy(request.arrays["rows"])]
    model(x).backward(torch.from_numpy(request.arrays["grad"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.grad is None:  # a parameter this batch did not reach
                continue
            before = ctx.state.get(f"momentum/{name}")
            buf = p.grad.numpy() if before is None else cfg["momentum"] * before + p.grad.numpy()
            ctx.state[f"momentum/{name}"] = buf
            p.sub_(cfg["lr"] * torch.from_numpy(buf))
    ctx.state.update({f"bottom/{k}": v.numpy().copy() for k, v in model.state_dict().items()})
    return Message("backward", config={"seconds": time.process_time() - start})


def splitnn(fed: Federation, epochs: int = 20, lr: float = 0.05, momentum: float = 0.9, batch_size: int = 256,
            hidden: int = 64, embedding: int = 16, seed: int = 0, arch: str = "mlp") -> dict:
    """Train with an ``arch`` bottom network per client (``mlp`` or ``tabnet``, see
    ``tabular.network``) and an MLP top; returns {"test_proba": (rows, classes) test
    probabilities, "test_labels", "communication", "top_params"}."""
    described = fed.broadcast("describe").require_all()
    schemas = {c: Schema.from_dict(m.config["schema"]) for c, m in described.items()}
    if len({m.config["ids_digest"] for m in described.values()}) != 1:
        raise FedpgmError("SplitNN needs a vertical federation whose clients hold the same row ids")
    holders = [c for c, s in schemas.items() if s.label is not None]
    if not holders:
        raise FedpgmError("no client holds the label; SplitNN needs one that does")
    label_schema = schemas[holders[0]]
    stats = merge_moments([m.config["moments"] for m in described.values()])
    lab = fed.send(holders[0], "labels").require_all()[holders[0]]
    y = torch.from_numpy(lab.arrays["train"])
    classes = label_schema.label_feature.cardinality
    clients = list(described)
    cfg = {"stats": stats, "hidden": hidden, "embedding": embedding, "seed": seed, "lr": lr, "momentum": momentum,
           "arch": arch}
    per: dict[str, tuple[dict, dict]] = {c: ({}, {**cfg, "seed": seed + i}) for i, c in enumerate(clients)}
    torch.manual_seed(seed)
    top = mlp(embedding * len(clients), classes, hidden, 1)
    opt = torch.optim.SGD(top.parameters(), lr=lr, momentum=momentum)
    gen = torch.Generator().manual_seed(seed)
    n = len(y)
    for _ in range(epochs):
        for idx in torch.randperm(n, generator=gen).split(batch_size):
            if len(idx) < 2:  # batch norm (TabNet) needs two rows
                continue
            rows = idx.numpy().astype(np.int64)
            fwd = fed.broadcast("forward", per_client={c: ({"rows": rows}, per[c][1]) for c in clients}).require_all()
            emb = [torch.from_numpy(fwd[c].arrays["embedding"]).requires_grad_(True) for c in clients]
            opt.zero_grad()
            nn.functional.cross_entropy(top(torch.cat(emb, dim=1)), y[idx]).backward()
            opt.step()
            grads = {c: e.grad for c, e in zip(clients, emb)}
            fed.broadcast("backward", per_client={c: ({"rows": rows, "grad": g.numpy()}, per[c][1])
                                                  for c, g in grads.items() if g is not None}).require_all()
    # training traffic only (the test pass below is not counted)
    out = {"communication": fed.ledger.totals(), "top_params": sum(p.numel() for p in top.parameters())}
    if "test" in lab.arrays:
        test_requests: dict[str, tuple[dict, dict]] = {c: ({}, {**per[c][1], "split": "test"}) for c in clients}
        fwd = fed.broadcast("forward", per_client=test_requests).require_all()
        with torch.no_grad():
            logits = top(torch.cat([torch.from_numpy(fwd[c].arrays["embedding"]) for c in clients], dim=1))
        out["test_proba"] = torch.softmax(logits, dim=1).numpy()
        out["test_labels"] = lab.arrays["test"]
    return out

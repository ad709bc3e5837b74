"""Tabular rows -> network inputs, and the MLP both neural baselines use.

Continuous columns are standardised with federation-wide statistics (each client sends its
row count, mean and centred sum of squares per column; combined exactly), discrete non-label
columns are one-hot over their schema categories; a missing value becomes 0 (the mean, or no
category).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import nn

from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.contract import Float, ListOf, MapOf
from fedpgm.federation.reference import combine


def inputs_of(schema: Schema) -> list[str]:
    return [n for n in schema.names if n != schema.label]


# What a server may send as standardisation statistics: per input column (of the federation, not
# only this client's), [mean, std] as finite numbers.
STATS = MapOf(ListOf(Float(-1e300, 1e300), 2))


def local_moments(frame: pd.DataFrame, schema: Schema) -> dict[str, tuple[int, float, float]]:
    """Per continuous input column: (complete rows, mean, centred sum of squares)."""
    out = {}
    for f in schema.features:
        if f.name == schema.label or f.discrete:
            continue
        x = frame[f.name].to_numpy(dtype=float)
        x = x[~np.isnan(x)]
        mean = float(x.mean()) if len(x) else 0.0
        out[f.name] = (len(x), mean, float(((x - mean) ** 2).sum()) if len(x) else 0.0)
    return out


def merge_moments(parts: list[dict]) -> dict[str, tuple[float, float]]:
    """Column -> (mean, standard deviation) over all clients' parts."""
    out = {}
    for name in {k for p in parts for k in p}:
        triples = [(p[name][0], np.array([p[name][1]]), np.array([[p[name][2]]])) for p in parts
                   if name in p and p[name][0] > 0]
        n, mean, scatter = combine(triples)
        out[name] = (float(mean[0]), float(np.sqrt(scatter[0, 0] / max(n - 1, 1))) or 1.0)
    return out


def encode(frame: pd.DataFrame, schema: Schema, stats: dict[str, tuple[float, float]]) -> np.ndarray:
    """(rows, width) float32 network inputs for the input columns of ``schema``."""
    blocks = []
    for name in inputs_of(schema):
        f = schema[name]
        x = frame[name].to_numpy(dtype=float)
        if f.discrete:
            hot = np.zeros((len(x), f.cardinality), dtype=np.float32)
            ok = ~np.isnan(x)
            hot[np.flatnonzero(ok), x[ok].astype(int)] = 1.0
            blocks.append(hot)
        else:
            mean, sd = stats[name]
            blocks.append(np.nan_to_num((x - mean) / sd, nan=0.0).astype(np.float32)[:, None])
    return np.concatenate(blocks, axis=1) if blocks else np.zeros((len(frame), 0), np.float32)


def mlp(width_in: int, width_out: int, hidden: int = 64, layers: int = 2) -> nn.Sequential:
    mods, w = [], width_in
    for _ in range(layers):
        mods += [nn.Linear(w, hidden), nn.ReLU()]
        w = hidden
    mods.append(nn.Linear(w, width_out))
    return nn.Sequential(*mods)


ARCHS = ("mlp", "tabnet")


class TabNetBody(nn.Module):
    """pytorch-tabnet's TabNet network with its defaults (n_d = n_a = 8, 3 steps, ghost batch
    norm over virtual batches of 128): (rows, width_in) -> (rows, width_out). Its sparsity
    regulariser (the second output, weight 1e-3 in TabNet's trainer) is left out, so both
    baselines train every architecture on the same loss."""

    def __init__(self, width_in: int, width_out: int) -> None:
        super().__init__()
        from pytorch_tabnet.tab_network import TabNet

        self.net = TabNet(width_in, width_out, n_d=8, n_a=8, n_steps=3, virtual_batch_size=128,
                          group_attention_matrix=torch.eye(width_in))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)[0]


def network(arch: str, width_in: int, width_out: int, hidden: int = 64, layers: int = 2) -> nn.Module:
    """The baselines' network: ``mlp`` (``hidden`` x ``layers``) or ``tabnet`` (the FedPC paper's
    peer; ``pip install pytorch-tabnet==4.1.0``, see scripts/install_peers.sh)."""
    if arch == "mlp":
        return mlp(width_in, width_out, hidden, layers)
    if arch == "tabnet":
        try:
            return TabNetBody(width_in, width_out)
        except ImportError as err:
            raise FedpgmError("the tabnet architecture needs pytorch-tabnet; "
                              "run `bash scripts/install_peers.sh`") from err
    raise FedpgmError(f"unknown architecture '{arch}'; use one of {ARCHS}")


def get_weights(model: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def set_weights(model: nn.Module, arrays: dict[str, np.ndarray]) -> None:
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in arrays.items()})


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())

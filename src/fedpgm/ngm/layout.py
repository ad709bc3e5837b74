"""How a table's features become the columns of a neural graphical model's input and output.

A numeric feature (continuous or ordinal) is one standardised column; a binary or categorical
feature is a one-hot block of its categories. A missing or unknown value enters the network at
its feature's mean (0 for a standardised column, the class frequencies for a one-hot block), so
"unknown" always means "at the mean", as the NGM papers do.

The layout also keeps what sampling needs to start a feature from its marginal without any raw
row: each numeric feature's quantile function as block means (``block_quantiles``) and each
category's frequency.

Every number a model carries summarises at least ``min_rows`` rows (the client policy's floor,
``fedpgm.data.policy``; ``MIN_ROWS`` = its default 10 for library calls outside a federation).
Interpolated quantiles of n <= 101 rows are the sorted rows themselves, so a quantile function
is sent as the means of k = min(101, n // min_rows) contiguous blocks of the sorted values
(each >= min_rows values), block i at level (i + 1/2) / k.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fedpgm.data.policy import ClientPolicy
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError

MIN_ROWS = ClientPolicy().min_rows  # the policy default: rows behind every statistic outside a federation
MAX_QUANTILES = 101


def block_quantiles(v: np.ndarray, min_rows: int = MIN_ROWS) -> list[float]:
    """(k,) the quantile function of the values ``v`` (n,) as the means of k = min(101, n //
    min_rows) contiguous blocks of the sorted values (sizes differ by at most one, each >=
    ``min_rows``); block i stands at level (i + 1/2) / k. Refuses n < ``min_rows``."""
    v = np.sort(np.asarray(v, dtype=float))
    k = min(MAX_QUANTILES, len(v) // min_rows)
    if k < 1:
        raise FedpgmError(f"{len(v)} value(s) are fewer than min_rows={min_rows}; no quantile can be "
                          "sent (add rows or lower the policy's min_rows)")
    return [float(b.mean()) for b in np.array_split(v, k)]


def quantile_curve(q) -> tuple[np.ndarray, np.ndarray]:
    """(levels, values), (k + 2,) each: the piecewise-linear quantile function through the k block
    means ``q`` at levels (i + 1/2) / k, extended half a block to levels 0 and 1 along the end
    slopes; ``np.interp(u, levels, values)`` draws from it."""
    q = np.asarray(q, dtype=float)
    k = len(q)
    lo, hi = (q[0], q[-1]) if k < 2 else (q[0] - (q[1] - q[0]) / 2, q[-1] + (q[-1] - q[-2]) / 2)
    return np.concatenate([[0.0], (np.arange(k) + 0.5) / k, [1.0]]), np.concatenate([[lo], q, [hi]])


def numeric(f: Feature) -> bool:
    """Continuous and ordinal features are modelled as one numeric column."""
    return f.kind in ("continuous", "ordinal")


@dataclass
class Layout:
    """Feature-to-column map of ``schema``; ``stats[name]`` holds mean/std/quantiles or freq."""

    schema: Schema
    stats: dict[str, dict]

    @staticmethod
    def fit(frame: pd.DataFrame, schema: Schema, min_rows: int = MIN_ROWS) -> "Layout":
        """Per-feature statistics from the training rows (NaN ignored), each of >= ``min_rows``
        rows: a numeric feature with fewer observed values is refused."""
        stats = {}
        for f in schema.features:
            v = frame[f.name].to_numpy(dtype=float)
            v = v[~np.isnan(v)]
            if v.size == 0:
                raise FedpgmError(f"column '{f.name}' has no observed value; drop it or add rows")
            if numeric(f):
                if v.size < min_rows:
                    raise FedpgmError(f"column '{f.name}' has {v.size} observed value(s), fewer than "
                                      f"min_rows={min_rows}; add rows or lower min_rows")
                std = float(v.std())
                stats[f.name] = {"mean": float(v.mean()), "std": std if std > 1e-12 else 1.0,
                                 "quantiles": block_quantiles(v, min_rows)}
            else:
                counts = np.bincount(v.astype(int), minlength=f.cardinality) + 1.0  # Laplace
                stats[f.name] = {"freq": (counts / counts.sum()).tolist()}
        return Layout(schema, stats)

    # -- the column map -----------------------------------------------------------------------
    @property
    def widths(self) -> list[int]:
        return [1 if numeric(f) else f.cardinality for f in self.schema.features]

    @property
    def width(self) -> int:
        """D', the number of network columns."""
        return int(sum(self.widths))

    @property
    def blocks(self) -> list[slice]:
        """The column slice of each feature, in schema order."""
        ends = np.cumsum(self.widths)
        return [slice(int(e - w), int(e)) for e, w in zip(ends, self.widths)]

    def block(self, name: str) -> slice:
        return self.blocks[self.schema.index(name)]

    def membership(self) -> np.ndarray:
        """(F, D') 0/1 matrix: feature f owns column j."""
        E = np.zeros((len(self.schema), self.width), dtype=np.float32)
        for i, b in enumerate(self.blocks):
            E[i, b] = 1.0
        return E

    def means(self) -> np.ndarray:
        """(D',) the input of an unknown value of every feature."""
        out = np.zeros(self.width, dtype=np.float32)
        for f, b in zip(self.schema.features, self.blocks):
            if not numeric(f):
                out[b] = self.stats[f.name]["freq"]
        return out

    # -- tables <-> network columns ------------------------------------------------------------
    def encode(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(rows, D') float32 network input and (rows, F) bool mask of observed values.

        Columns of the schema that ``frame`` lacks count as unknown; extra columns are ignored.
        """
        n = len(frame)
        X = np.tile(self.means(), (n, 1))
        seen = np.zeros((n, len(self.schema)), dtype=bool)
        for i, (f, b) in enumerate(zip(self.schema.features, self.blocks)):
            if f.name not in frame.columns:
                continue
            v = frame[f.name].to_numpy(dtype=float)
            ok = ~np.isnan(v)
            seen[:, i] = ok
            if numeric(f):
                s = self.stats[f.name]
                X[ok, b.start] = (v[ok] - s["mean"]) / s["std"]
            else:
                codes = v[ok].astype(int)
                X[ok, b] = 0.0
                X[np.flatnonzero(ok), b.start + codes] = 1.0
        return X.astype(np.float32), seen

    def to_value(self, name: str, column: np.ndarray) -> np.ndarray:
        """A standardised numeric column back in its feature's units (ordinals rounded, clipped)."""
        f, s = self.schema[name], self.stats[name]
        v = column * s["std"] + s["mean"]
        if f.kind == "ordinal":
            v = np.clip(np.round(v), 0, f.cardinality - 1)
        return v

    def to_dict(self) -> dict:
        return {"schema": self.schema.to_dict(), "stats": self.stats}

    @staticmethod
    def from_dict(d: dict) -> "Layout":
        schema = Schema.from_dict(d["schema"])
        missing = [n for n in schema.names if n not in d["stats"]]
        if missing:
            raise FedpgmError(f"model layout lacks statistics for {missing}; the file is damaged")
        empty = [f.name for f in schema.features if numeric(f) and not d["stats"][f.name].get("quantiles")]
        if empty:
            raise FedpgmError(f"model layout has no quantiles for {empty}; the file is damaged")
        return Layout(schema, d["stats"])

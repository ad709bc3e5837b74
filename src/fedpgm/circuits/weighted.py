"""Weighted statistics a leaf is fitted from: rows x (rows, L) with weights w (EM's
responsibilities, or 1), missing values skipped, stds floored, and a floor of ``min_rows`` rows
under which a leaf takes its column's marginal (a FedPC client's policy; ``floored_values``)."""

from __future__ import annotations

import math

import numpy as np

from fedpgm.errors import FedpgmError

MIN_STD = 1e-3  # absolute floor of a continuous leaf's std
MIN_STD_FRACTION = 0.01  # default floor relative to the column's std in the learner's data


def std_floors(X: np.ndarray, fraction: float = MIN_STD_FRACTION) -> np.ndarray:
    """(variables,) the least std of a continuous leaf per column of ``X`` (rows, variables):
    ``fraction`` of the column's std, at least ``MIN_STD``. A floor relative to the column's
    scale keeps a leaf fitted to a nearly constant slice (capital-gain = 0 in a cluster) from
    a density spike that would swamp every other term of a query."""
    if fraction < 0:
        raise FedpgmError(f"min_std_fraction must be >= 0, got {fraction}")
    with np.errstate(invalid="ignore"):
        sd = np.nanstd(np.asarray(X, dtype=float), axis=0) if len(X) else np.zeros(np.shape(X)[1])
    return np.maximum(np.nan_to_num(sd) * fraction, MIN_STD)


def floored_values(x: np.ndarray, w: np.ndarray, column: np.ndarray,
                   min_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The values (n,) and weights (n,) a leaf is fitted on under a floor of ``min_rows`` rows: its
    own ``x``, ``w`` where they rest on that many (sum w >= min_rows x max w: no row carries over
    1/min_rows of the weight, so Kish's (sum w)^2 / sum w^2 >= min_rows too), else its column's
    observed values ``column`` (N,) with weight 1 (the marginal) if that many, else none."""
    if min_rows <= 1 or w.sum() >= min_rows * w.max(initial=0.0) > 0:
        return x, w
    return (column, np.ones(len(column))) if len(column) >= min_rows else (column[:0], np.ones(0))


def weighted_mean_std(x: np.ndarray, w: np.ndarray, min_std: float = MIN_STD) -> tuple[float, float]:
    total = w.sum()
    if total <= 0:
        return 0.0, 1.0
    mean = float((w * x).sum() / total)
    var = float((w * (x - mean) ** 2).sum() / total)
    return mean, max(math.sqrt(max(var, 0.0)), min_std)


def moments(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.array([w.sum(), (w * x).sum(), (w * x * x).sum()])


def observed(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of ``x`` (rows, L) and ``w`` (L, rows): values (L, rows) and weights (L, rows), both 0 where unobserved."""
    seen = ~np.isnan(x.T)
    if seen.all():  # (the common case: no pass over the values and weights)
        return x.T, w
    return np.where(seen, x.T, 0.0), np.where(seen, w, 0.0)


def mean_std_from(m: np.ndarray, min_std: float = MIN_STD) -> tuple[float, float]:
    if m[0] <= 0:
        return 0.0, 1.0
    mean = m[1] / m[0]
    return float(mean), max(math.sqrt(max(m[2] / m[0] - mean * mean, 0.0)), min_std)

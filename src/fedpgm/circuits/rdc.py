"""The randomized dependence coefficient (RDC; Lopez-Paz et al. 2013) for all pairs at once.

Per variable: the empirical copula (ranks / n; one-hot columns for categorical variables),
k random sine and cosine features, centred, and an orthonormal basis of their span. The RDC of
a pair is the largest canonical correlation of their two feature sets, i.e. the largest
singular value of ``Q_i^T Q_j``. Stacking every basis gives all pairs from one matrix product
and one batched singular-value computation, instead of SPFlow's Python loop over pairs. A
constant variable has an empty basis, so its RDC with anything is 0: it splits off as
independent instead of crashing the learner.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import rankdata


def filled(data: np.ndarray) -> np.ndarray:
    """(n, d) with each NaN replaced by its column's mean (0 for an all-NaN column)."""
    seen = np.isfinite(data)
    counts = seen.sum(axis=0)
    means = np.where(counts > 0, np.where(seen, data, 0.0).sum(axis=0) / np.maximum(counts, 1), 0.0)
    return np.where(np.isnan(data), means, data)


def onehot_copula(col: np.ndarray, cardinality: int) -> np.ndarray:
    """(n,) codes -> (n, m) copula of the non-constant one-hot columns: the average rank of a
    0/1 column is (n0 + 1) / 2 for its zeros and n0 + (n1 + 1) / 2 for its ones (over n)."""
    onehot = col[:, None] == np.arange(cardinality)[None, :]
    ones = onehot.sum(axis=0)
    onehot, ones = onehot[:, (ones > 0) & (ones < len(col))], ones[(ones > 0) & (ones < len(col))]
    if not onehot.size:
        return np.zeros((len(col), 1))
    zeros = len(col) - ones
    return np.where(onehot, zeros + (ones + 1) / 2, (zeros + 1) / 2) / len(col)


def random_features(data: np.ndarray, cardinalities: list[int], k: int = 10, s: float = 1.0 / 6.0,
                    seed: int = 0) -> torch.Tensor:
    """(n, d) data -> (n, d, 2k) float64 sine and cosine features of each variable's copula.

    The copula of every single-column variable comes from one ranking call and its features from
    one broadcast product (sine and cosine by torch: vectorised and threaded, 2-3x numpy's); the
    projections are drawn variable by variable, in order, so the result is the per-variable
    definition's to rounding (``tests/circuits/test_rdc.py``).
    """
    n, d = data.shape
    rng = np.random.default_rng(seed)
    data = filled(data)
    single = [j for j in range(d) if cardinalities[j] <= 2]
    copula = {j: onehot_copula(data[:, j], cardinalities[j]) for j in range(d) if cardinalities[j] > 2}
    draws = {}
    for j in range(d):  # as in the RDC paper: weights ~ N(0, s^2 / inputs), the bias an input
        m = 1 if j not in copula else copula[j].shape[1]
        draws[j] = rng.normal(size=(m + 1, k)) * (s / (m + 1))
    feats = torch.empty((n, d, 2 * k), dtype=torch.float64)
    if single:
        ranks = torch.from_numpy(rankdata(data[:, single], axis=0) / n)  # (n, d1)
        w = torch.from_numpy(np.stack([draws[j] for j in single]))  # (d1, 2, k)
        proj = torch.addcmul(w[:, 1, :], ranks[:, :, None], w[:, 0, :])  # (n, d1, k)
        at = slice(None) if len(single) == d else torch.tensor(single)
        feats[:, at, :k], feats[:, at, k:] = proj.sin(), proj.cos()
    for j, x in copula.items():
        proj = torch.from_numpy(x @ draws[j][:-1] + draws[j][-1])
        feats[:, j, :k], feats[:, j, k:] = proj.sin(), proj.cos()
    return feats


def rdc_matrix(data: np.ndarray, cardinalities: list[int], k: int = 10, s: float = 1.0 / 6.0,
               seed: int = 0) -> np.ndarray:
    """(n, d) data -> (d, d) symmetric RDC matrix with zeros on the diagonal.

    ``cardinalities[j]`` is 0 for a continuous variable, else its number of states.
    """
    n, d = data.shape
    f = random_features(data, cardinalities, k, s, seed)
    f = f - f.mean(dim=0)
    # Whiten each variable's features (eigen-decomposition of its own Gram block), keeping
    # only directions with variance: a binary variable has one, a constant one none (so its
    # RDC with anything is 0). Only the kept directions enter the cross products.
    lam, vec = torch.linalg.eigh(torch.einsum("nja,njb->jab", f, f))  # ascending
    top = lam[:, -1:].clamp_min(1e-300)
    keep = (lam > 1e-10 * top) & (lam > 1e-12 * n)
    r = max(int(keep.sum(dim=1).max()), 1)
    scale = torch.where(keep, lam.clamp_min(1e-300).rsqrt(), torch.zeros_like(lam))
    w = (vec * scale.unsqueeze(1))[:, :, -r:]  # (d, 2k, r)
    q = torch.einsum("nja,jar->njr", f, w).reshape(n, d * r)  # orthonormal bases, side by side
    canon = (q.T @ q).reshape(d, r, d, r).permute(0, 2, 1, 3)  # (d, d, r, r): Q_i^T Q_j
    rdc = torch.linalg.matrix_norm(canon, ord=2).clamp(0.0, 1.0).numpy()
    np.fill_diagonal(rdc, 0.0)
    return rdc

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


def copula_features(col: np.ndarray, cardinality: int) -> np.ndarray:
    """(n,) -> (n, m) copula-transformed inputs of one variable (NaN: column mean)."""
    col = np.where(np.isnan(col), np.nanmean(col) if np.isfinite(col).any() else 0.0, col)
    if cardinality > 2:
        onehot = (col[:, None] == np.arange(cardinality)[None, :]).astype(float)
        onehot = onehot[:, onehot.std(axis=0) > 0]
        return np.column_stack([rankdata(c) / len(c) for c in onehot.T]) if onehot.size else np.zeros((len(col), 1))
    return (rankdata(col) / len(col))[:, None]


def rdc_matrix(data: np.ndarray, cardinalities: list[int], k: int = 10, s: float = 1.0 / 6.0,
               seed: int = 0) -> np.ndarray:
    """(n, d) data -> (d, d) symmetric RDC matrix with zeros on the diagonal.

    ``cardinalities[j]`` is 0 for a continuous variable, else its number of states.
    """
    n, d = data.shape
    rng = np.random.default_rng(seed)
    feats = np.empty((n, d, 2 * k))
    for j in range(d):
        x = copula_features(data[:, j], cardinalities[j])
        x = np.column_stack([x, np.ones(n)])
        proj = x @ (rng.normal(size=(x.shape[1], k)) * (s / x.shape[1]))  # as in the RDC paper
        feats[:, j, :k], feats[:, j, k:] = np.sin(proj), np.cos(proj)
    f = torch.from_numpy(feats)
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

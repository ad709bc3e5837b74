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


def average_ranks(x: np.ndarray) -> np.ndarray:
    """(m, n) -> (m, n) rank of each value within its row, ties given their average rank (1..n):
    scipy's ``rankdata(x, axis=1)``, from one argsort and three vectorised passes (5x faster)."""
    m, n = x.shape
    order = np.argsort(x, axis=1)
    xs = np.take_along_axis(x, order, axis=1)
    at = np.broadcast_to(np.arange(n), (m, n))
    first = np.ones((m, n), dtype=bool)
    first[:, 1:] = xs[:, 1:] != xs[:, :-1]
    last = np.ones((m, n), dtype=bool)
    last[:, :-1] = first[:, 1:]
    start = np.maximum.accumulate(np.where(first, at, 0), axis=1)
    end = np.minimum.accumulate(np.where(last, at, n - 1)[:, ::-1], axis=1)[:, ::-1]
    out = np.empty((m, n))
    np.put_along_axis(out, order, (start + end) / 2 + 1, axis=1)
    return out


def variable_features(data: np.ndarray, cardinalities: list[int], k: int = 10, s: float = 1.0 / 6.0,
                      seed: int = 0) -> torch.Tensor:
    """(n, d) data -> (d, 2k, n) float64 sine and cosine features of each variable's copula.

    Variables first and rows last, so every per-variable product below is one contiguous batched
    matrix product. The copula of every single-column variable comes from one ranking pass and
    its features from one broadcast product; the projections are drawn variable by variable, in
    order, so the result is the per-variable definition's to rounding (``tests/circuits/test_rdc.py``).
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
    feats = torch.empty((d, 2 * k, n), dtype=torch.float64)
    if single:
        ranks = torch.from_numpy(average_ranks(np.ascontiguousarray(data[:, single].T)) / n)  # (d1, n)
        w = torch.from_numpy(np.stack([draws[j] for j in single]))  # (d1, 2, k)
        proj = torch.addcmul(w[:, 1, :, None], ranks[:, None, :], w[:, 0, :, None])  # (d1, k, n)
        if len(single) == d:  # sine and cosine straight into place
            torch.sin(proj, out=feats[:, :k])
            torch.cos(proj, out=feats[:, k:])
        else:
            at = torch.tensor(single)
            feats[at, :k], feats[at, k:] = proj.sin(), proj.cos()
    for j, x in copula.items():
        proj = torch.from_numpy((x @ draws[j][:-1] + draws[j][-1]).T)  # (k, n)
        feats[j, :k], feats[j, k:] = proj.sin(), proj.cos()
    return feats


def rdc_matrix(data: np.ndarray, cardinalities: list[int], k: int = 10, s: float = 1.0 / 6.0,
               seed: int = 0) -> np.ndarray:
    """(n, d) data -> (d, d) symmetric RDC matrix with zeros on the diagonal.

    ``cardinalities[j]`` is 0 for a continuous variable, else its number of states.
    """
    n, d = data.shape
    f = variable_features(data, cardinalities, k, s, seed)
    f -= f.mean(dim=2, keepdim=True)
    # Whiten each variable's features (eigen-decomposition of its own Gram block), keeping
    # only directions with variance: a binary variable has one, a constant one none (so its
    # RDC with anything is 0). Only the kept directions enter the cross products.
    lam, vec = torch.linalg.eigh(f @ f.transpose(1, 2))  # (d, 2k), ascending
    top = lam[:, -1:].clamp_min(1e-300)
    keep = (lam > 1e-10 * top) & (lam > 1e-12 * n)
    r = max(int(keep.sum(dim=1).max()), 1)
    scale = torch.where(keep, lam.clamp_min(1e-300).rsqrt(), torch.zeros_like(lam))
    w = (vec * scale.unsqueeze(1))[:, :, -r:]  # (d, 2k, r)
    # Orthonormal bases, stacked; their cross products in float32 (half the time): the entries are
    # cosines in [-1, 1], kept to ~1e-7, far below the RDC's own sampling noise (~1 / sqrt(n)).
    q = (w.transpose(1, 2) @ f).reshape(d * r, n).to(torch.float32)
    canon = (q @ q.T).to(torch.float64).reshape(d, r, d, r).permute(0, 2, 1, 3)  # (d, d, r, r): Q_i^T Q_j
    rdc = torch.linalg.matrix_norm(canon, ord=2).clamp(0.0, 1.0).numpy()
    np.fill_diagonal(rdc, 0.0)
    return rdc

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


def onehot(col: np.ndarray, cardinality: int) -> np.ndarray:
    """(n,) codes -> (n, m) bool one-hot columns of the states 0..cardinality-1 that occur in
    ``col``, in state order (a value that is no state, e.g. a NaN's fill, sets none). The states
    that do not occur would be columns of zeros: leaving them out keeps a slice of a few hundred
    rows of a date column (thousands of states) from costing thousands of columns."""
    present = np.unique(col)
    present = present[(present == np.floor(present)) & (present >= 0) & (present < cardinality)]
    return col[:, None] == present[None, :]


def onehot_copula(col: np.ndarray, cardinality: int) -> np.ndarray:
    """(n,) codes -> (n, m) copula of the non-constant one-hot columns: the average rank of a
    0/1 column is (n0 + 1) / 2 for its zeros and n0 + (n1 + 1) / 2 for its ones (over n)."""
    hot = onehot(col, cardinality)
    ones = hot.sum(axis=0)
    hot, ones = hot[:, ones < len(col)], ones[ones < len(col)]
    if not hot.size:
        return np.zeros((len(col), 1))
    zeros = len(col) - ones
    return np.where(hot, zeros + (ones + 1) / 2, (zeros + 1) / 2) / len(col)


def average_ranks(x: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """(m, n) -> (m, n) rank of each value within its row, ties given their average rank (1..n):
    scipy's ``rankdata(x, axis=1)``, from one argsort and three vectorised passes (5x faster).
    ``order``: (m, n) an order sorting each row, when known (any order of ties gives the same ranks)."""
    m, n = x.shape
    if order is None:
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


def restrict_order(order: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """(d, n) orders sorting each column of a slice -> (d, keep.sum()) those of the slice's rows
    where ``keep`` holds, renumbered from 0: a sorted order filtered stays sorted, so a child slice
    needs no sort of its own (O(d n) instead of O(d n log n))."""
    renumber = np.cumsum(keep) - 1
    return renumber[order[keep[order]].reshape(len(order), -1)]


BLOCK_CELLS = 1 << 20  # features are made and reduced this many (variable, feature, row) cells at a time


class RandomFeatures:
    """The RDC's random sine and cosine features of each variable's copula, made block by block.

    Per variable: its copula (ranks / n; the one-hot columns' for a categorical one) and a random
    projection drawn as in the RDC paper, weights ~ N(0, s^2 / inputs) with the bias an input,
    variable by variable in order (so features equal the per-variable definition to rounding,
    ``tests/circuits/test_rdc.py``). The copulas of all single-column variables come from one
    ranking pass (``order``: (d, n) orders sorting each column of NaN-free data, when known);
    ``block`` makes a block's features from one broadcast product.
    """

    def __init__(self, data: np.ndarray, cardinalities: list[int], k: int = 10, s: float = 1.0 / 6.0,
                 seed: int = 0, order: np.ndarray | None = None) -> None:
        n, d = data.shape
        rng = np.random.default_rng(seed)
        data = filled(data)
        self.k, self.n = k, n
        self.copula = {j: onehot_copula(data[:, j], cardinalities[j]) for j in range(d) if cardinalities[j] > 2}
        self.draws = []
        for j in range(d):
            m = 1 if j not in self.copula else self.copula[j].shape[1]
            self.draws.append(torch.from_numpy(rng.normal(size=(m + 1, k)) * (s / (m + 1))))
        single = [j for j in range(d) if j not in self.copula]
        self.rank_row = {j: i for i, j in enumerate(single)}
        self.ranks = (torch.from_numpy(average_ranks(np.ascontiguousarray(data[:, single].T),
                                                     None if order is None else order[single]) / n)
                      if single else torch.empty((0, n), dtype=torch.float64))  # (single variables, n)

    def block(self, variables: range) -> torch.Tensor:
        """(b, 2k, n) float64 features of ``variables`` (consecutive), sines then cosines."""
        k = self.k
        feats = torch.empty((len(variables), 2 * k, self.n), dtype=torch.float64)
        proj = feats[:, k:]  # projections first, in the cosine slots
        single = [i for i, j in enumerate(variables) if j in self.rank_row]
        if single:
            js = [variables[i] for i in single]
            w = torch.stack([self.draws[j] for j in js])  # (b1, 2, k)
            ranks = self.ranks[[self.rank_row[j] for j in js]]  # (b1, n)
            # a multiply then an add: addcmul's broadcast path measured 4x slower
            if len(single) == len(variables):
                torch.mul(w[:, 0, :, None], ranks[:, None, :], out=proj).add_(w[:, 1, :, None])
            else:
                proj[single] = torch.mul(w[:, 0, :, None], ranks[:, None, :]).add_(w[:, 1, :, None])
        for i, j in enumerate(variables):
            if j in self.copula:
                wj = self.draws[j].numpy()
                proj[i] = torch.from_numpy((self.copula[j] @ wj[:-1] + wj[-1]).T)  # (k, n)
        torch.sin(proj, out=feats[:, :k])
        proj.cos_()
        return feats


def rdc_matrix(data: np.ndarray, cardinalities: list[int], k: int = 10, s: float = 1.0 / 6.0,
               seed: int = 0, order: np.ndarray | None = None) -> np.ndarray:
    """(n, d) data -> (d, d) symmetric RDC matrix with zeros on the diagonal.

    ``cardinalities[j]`` is 0 for a continuous variable, else its number of states; ``order`` as
    for ``RandomFeatures``. Features are made, whitened and projected a block of variables at a
    time (``BLOCK_CELLS``): no (d, 2k, n) tensor is ever allocated, whose fresh pages cost as much
    as its sines (blobs 50,000 x 20: LearnSPN 1.42 -> 1.24 s; the old code took 1.14 s with glibc
    made to keep freed memory).
    """
    n, d = data.shape
    features = RandomFeatures(data, cardinalities, k, s, seed, order)
    step = max(1, BLOCK_CELLS // (2 * k * n))
    bases = []
    for lo in range(0, d, step):
        f = features.block(range(lo, min(d, lo + step)))
        f -= f.mean(dim=2, keepdim=True)
        # Whiten each variable's features (eigen-decomposition of its own Gram block), keeping
        # only directions with variance: a binary variable has one, a constant one none (so its
        # RDC with anything is 0). Only the kept directions enter the cross products.
        lam, vec = torch.linalg.eigh(f @ f.transpose(1, 2))  # (b, 2k), ascending
        top = lam[:, -1:].clamp_min(1e-300)
        keep = (lam > 1e-10 * top) & (lam > 1e-12 * n)  # a suffix of each row (lam ascends)
        r = max(int(keep.sum(dim=1).max()), 1)
        scale = torch.where(keep, lam.clamp_min(1e-300).rsqrt(), torch.zeros_like(lam))
        w = (vec * scale.unsqueeze(1))[:, :, -r:]  # (b, 2k, r)
        bases.append((w.transpose(1, 2) @ f).to(torch.float32))  # (b, r, n)
    # Orthonormal bases, stacked (a block's unkept directions are zero rows); their cross products
    # in float32 (half the time): the entries are cosines in [-1, 1], kept to ~1e-7, far below the
    # RDC's own sampling noise (~1 / sqrt(n)).
    r = max(b.shape[1] for b in bases)
    q = torch.zeros((d, r, n), dtype=torch.float32)
    at = 0
    for b in bases:
        q[at:at + len(b), r - b.shape[1]:] = b
        at += len(b)
    q = q.reshape(d * r, n)
    canon = (q @ q.T).to(torch.float64).reshape(d, r, d, r).permute(0, 2, 1, 3)  # (d, d, r, r): Q_i^T Q_j
    rdc = torch.linalg.matrix_norm(canon, ord=2).clamp(0.0, 1.0).numpy()
    np.fill_diagonal(rdc, 0.0)
    return rdc

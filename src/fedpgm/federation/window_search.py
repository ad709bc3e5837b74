"""Vectorised search for stored patterns among the windows of a long vector, up to a canonical form.

A ``Detector`` holds patterns of ``w`` values, each already in a canonical form (as is,
``exact``; sorted, ``sort_rows``; or standardised to mean 0 and std 1, ``standardise`` and
``standardise_increasing``; ``both_signs`` stores ``x`` and ``-x``), and finds the first window of
``w`` consecutive values of a vector whose canonical form equals one of them, within a tolerance
per value. Each window is put in canonical form (``CHUNK`` at a time), hashed with one dot product
with random weights, looked up among the patterns' sorted hashes (``within``), and candidates are
confirmed value by value. Rows in any order wider than ``ANY_ORDER_WIDTH`` are found without
sorting every window (``Detector.find_any_order``).

The privacy audit (``fedpgm.federation.privacy``) decides which windows of a client's table are
patterns and searches its messages with these detectors.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

CHUNK = 1 << 16  # windows canonicalised at once
ANY_ORDER_WIDTH = 32  # rows in any order wider than this are found by their sums, not by sorting windows


# -- canonical forms of windows (rows of W, shape (n, w)); rows that cannot match are NaN -------
def exact(W: np.ndarray) -> np.ndarray:
    return W


def sort_rows(W: np.ndarray) -> np.ndarray:
    return np.sort(W, axis=1)


def standardise(W: np.ndarray) -> np.ndarray:
    """Each window minus its mean, over its std: invariant to a * x + b for a > 0 (patterns
    are stored with both signs). Windows with no spread are NaN."""
    m = W.mean(axis=1, keepdims=True)
    s = W.std(axis=1, keepdims=True)
    ok = s > 1e-12 * (1.0 + np.abs(m))
    return np.where(ok, (W - m) / np.where(ok, s, 1.0), np.nan)


def standardise_increasing(W: np.ndarray) -> np.ndarray:
    """As ``standardise``, for strictly monotone windows only, a decreasing one reversed first
    (so a sorted copy is found in either order)."""
    d = np.diff(W, axis=1)
    up, down = np.asarray((d > 0).all(axis=1)), np.asarray((d < 0).all(axis=1))
    W = np.where(down[:, None], W[:, ::-1], W)
    return np.where((up | down)[:, None], standardise(W), np.nan)


def within(sorted_values: np.ndarray, h: np.ndarray, tol: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, count): the ``count[i]`` values of ``sorted_values`` from position ``lo[i]`` on lie in
    [h[i] - tol[i], h[i] + tol[i]] (NaN h: none). The upper end is searched only for keys with a
    value in reach (almost none), halving the binary searches."""
    lo = np.searchsorted(sorted_values, h - tol)
    count = np.zeros(len(h), dtype=np.intp)
    if len(sorted_values):
        reach = np.flatnonzero(sorted_values[np.minimum(lo, len(sorted_values) - 1)] <= h + tol)
        count[reach] = np.searchsorted(sorted_values, h[reach] + tol[reach], side="right") - lo[reach]
    return lo, count


class Detector:
    """Windows of ``patterns.shape[1]`` values whose canonical form equals one of the patterns'
    (already canonical), within ``tol`` per value. With ``margin`` (bits per pattern), a pattern
    is found only in messages of at most ``2^margin`` windows (a match by chance somewhere among
    more is no longer unlikely)."""

    def __init__(self, patterns: np.ndarray, what: list[str], canon: Callable, tol: float, seed: int = 0,
                 margin: np.ndarray | None = None):
        keep = ~np.isnan(patterns).any(axis=1)
        self.patterns, self.what = patterns[keep], [w for w, k in zip(what, keep) if k]
        self.margin = np.full(len(self.patterns), np.inf) if margin is None else margin[keep]
        self.canon, self.tol = canon, tol
        self.width = patterns.shape[1]
        rng = np.random.default_rng(seed)
        self.weights = np.asarray(rng.uniform(1.0, 2.0, self.width))
        if canon in (standardise, standardise_increasing):
            # standardised windows sum to 0, so positive weights hash them into a narrow range
            # (std ~0.8 at width 8, against 33,000 patterns: a near hash for most windows of a
            # model's weights, each then compared value by value); random signs spread the
            # hashes ~5x wider at the same bound on |hash difference|, tol * sum |weights|
            self.weights *= rng.choice([-1.0, 1.0], self.width)
        hashes = self.patterns @ self.weights
        self.order = np.argsort(hashes)
        self.sorted = hashes[self.order]
        self.hash_tol = tol * np.abs(self.weights).sum()
        if canon is sort_rows and self.width > ANY_ORDER_WIDTH:  # find_any_order's per-pattern sums
            self.p1, self.p2 = self.patterns.sum(axis=1), (self.patterns ** 2).sum(axis=1)
            self.bound = tol * (self.width + np.abs(self.patterns).sum(axis=1))  # per value: tol * (1 + |p|)
            self.p1_order = np.argsort(self.p1)
            self.p1_sorted = self.p1[self.p1_order]

    def find(self, flat: np.ndarray, message_size: int = 0) -> str | None:
        """A description of the first pattern found in ``flat`` (float32-rounded), or None;
        ``message_size``: the values of the whole message ``flat`` is part of (default: its own)."""
        w = self.width
        if len(self.patterns) == 0 or flat.size < w:
            return None
        least = np.log2(max(message_size, flat.size) - w + 1)  # the margin a pattern needs: its windows
        if self.canon is sort_rows and w > ANY_ORDER_WIDTH:
            return self.find_any_order(flat, least)
        windows = np.lib.stride_tricks.sliding_window_view(flat, w)
        for start in range(0, len(windows), CHUNK):
            C = self.canon(windows[start: start + CHUNK])
            h = C @ self.weights
            tol = self.hash_tol * (1.0 + np.abs(h)) if self.canon is exact or self.canon is sort_rows \
                else np.full_like(h, self.hash_tol)
            lo, count = within(self.sorted, h, tol)
            hit = self.verify(C, lo, count, least)
            if hit is not None:
                return hit
        return None

    def verify(self, C: np.ndarray, lo: np.ndarray, count: np.ndarray, least: float,
               block: int = 1 << 16) -> str | None:
        """Compare each window ``C[i]`` value by value with the ``count[i]`` patterns whose hash
        lies near its own (sorted positions ``lo[i]`` on), all pairs at once in blocks: windows of
        wide data sets have a few such candidates each, too many for a loop in Python."""
        windows = np.flatnonzero(count > 0)
        if not len(windows):
            return None
        n = count[windows]
        pair_window = np.repeat(windows, n)
        first = np.repeat(np.cumsum(n) - n, n)
        pair_pattern = self.order[np.repeat(lo[windows], n) + np.arange(len(pair_window)) - first]
        relative = self.canon in (exact, sort_rows)
        for b in range(0, len(pair_window), block):
            w, r = pair_window[b:b + block], pair_pattern[b:b + block]
            pats = self.patterns[r]
            scale = 1.0 + np.abs(pats) if relative else 1.0
            ok = (np.abs(C[w] - pats) <= self.tol * scale).all(axis=1) & (self.margin[r] >= least)
            if ok.any():
                return self.what[r[np.argmax(ok)]]
        return None

    def find_any_order(self, flat: np.ndarray, least: float) -> str | None:
        """``find`` for wide rows in any order (images: 784 values) without sorting every window,
        which costs O(n w log w): a window can hold a row's values only if its sum and sum of
        squares, taken over all windows at once by cumulative sums (O(n)), match the row's
        within the tolerance; only those windows are sorted and compared value by value."""
        w = self.width
        x = flat.astype(np.float64)
        gaps = np.isnan(x)  # (a window holding a NaN matches nothing; its sums are set to NaN)
        x = np.where(gaps, 0.0, x)
        c1 = np.concatenate([[0.0], np.cumsum(x)])
        c2 = np.concatenate([[0.0], np.cumsum(x * x)])
        s1, s2 = c1[w:] - c1[:-w], c2[w:] - c2[:-w]
        if gaps.any():
            cg = np.concatenate([[0], np.cumsum(gaps)])
            s1[cg[w:] > cg[:-w]] = np.nan
        p1, p2, bound, order = self.p1, self.p2, self.bound, self.p1_order
        slack = 1e-12 * (np.abs(c1[-1]) + np.abs(c2[-1]) + w)  # rounding of the cumulative sums
        lo, count = within(self.p1_sorted, s1, np.full_like(s1, bound.max() + slack))
        for i in np.flatnonzero(count):
            for r in order[lo[i]:lo[i] + count[i]]:
                close = abs(s1[i] - p1[r]) <= bound[r] + slack and self.margin[r] >= least
                if close and abs(s2[i] - p2[r]) <= 2 * bound[r] * (1 + np.abs(self.patterns[r]).max()) + slack:
                    window = np.sort(flat[i:i + w])
                    if (np.abs(window - self.patterns[r]) <= self.tol * (1.0 + np.abs(self.patterns[r]))).all():
                        return self.what[r]
        return None


def both_signs(windows: np.ndarray, canon: Callable) -> np.ndarray:
    """Canonical patterns of raw windows and of their negations (a * x + b with a < 0)."""
    return np.concatenate([canon(windows), canon(-windows)])

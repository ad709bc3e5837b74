"""Privacy audit: prove that no client message carries that client's raw rows or columns.

``PrivacyAudit(partition)`` is a hook for a federation (``audit=``): every reply a client sends
is checked against that client's private table (train and test rows). A message fails if any
array, or the numbers anywhere in its config, contain as a contiguous run

- a complete raw row (all the client's columns, in its column order), or
- more than ``max_column_run`` consecutive values of one continuous column (in row order).

Values are compared at float32 precision, so a float32 copy of float64 data is caught too.
The search is vectorised: sliding-window dot products with random weights (one convolution)
find candidates, which are then confirmed exactly. Rows with missing values are not searched
for, nor rows of a client whose columns allow fewer than 2^16 distinct rows (a row of five
binary codes is a pattern of small integers found in any circuit structure, and identifies no
one); discrete columns are left to the row rule (runs of small integer codes are in any model).
Every algorithm's tests run with this audit on.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from fedpgm.data.partition import ClientData, Partition
from fedpgm.federation.codec import Message


MIN_ROW_BITS = 16.0  # rows with fewer possible values than 2^16 identify no one


def row_bits(client: ClientData) -> float:
    """log2 of the number of possible rows (infinite with a continuous column)."""
    bits = 0.0
    for f in client.schema.features:
        if not f.discrete:
            return float("inf")
        bits += float(np.log2(max(f.cardinality, 1)))
    return bits


class PrivacyViolation(AssertionError):
    """A client message contains raw data of that client."""


def numbers_in(value) -> list[float]:
    """All numbers inside a JSON-like value, in order (bools excluded)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in numbers_in(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in numbers_in(v)]
    return []


def as32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)


class Patterns:
    """Sequences (rows of ``patterns``, shape (n, w)) to look for inside flat vectors."""

    def __init__(self, patterns: np.ndarray, what: list[str], seed: int = 0) -> None:
        self.patterns = as32(patterns)
        self.what = what
        self.weights = np.random.default_rng(seed).uniform(1.0, 2.0, self.patterns.shape[1])
        hashes = self.patterns @ self.weights
        self.order = np.argsort(hashes)
        self.sorted = hashes[self.order]

    def find(self, flat: np.ndarray) -> str | None:
        """A description of the first pattern found in ``flat``, or None."""
        w = self.patterns.shape[1]
        if len(self.patterns) == 0 or flat.size < w:
            return None
        flat = as32(flat)
        windows = np.convolve(flat, self.weights[::-1], mode="valid")
        tol = 1e-9 * (1.0 + np.abs(windows))
        pos = np.searchsorted(self.sorted, windows - tol)
        near = (pos < len(self.sorted)) & (np.abs(self.sorted[np.minimum(pos, len(self.sorted) - 1)]
                                                  - windows) <= tol)
        for i in np.flatnonzero(near):
            j = pos[i]
            while j < len(self.sorted) and self.sorted[j] <= windows[i] + tol[i]:
                r = self.order[j]
                if np.array_equal(flat[i: i + w], self.patterns[r]):
                    return self.what[r]
                j += 1
        return None


class PrivacyAudit:
    """Audit hook: ``audit(client_id, message)`` raises ``PrivacyViolation`` on a leak."""

    def __init__(self, clients: Partition | Sequence[ClientData], max_column_run: int = 5) -> None:
        clients = clients.clients if isinstance(clients, Partition) else clients
        self.max_column_run = max_column_run
        self.checked = 0
        self.rows: dict[str, Patterns] = {}
        self.runs: dict[str, Patterns] = {}
        for c in clients:
            table = pd.concat([f for f in (c.train, c.test) if f is not None])
            values = table.to_numpy(dtype=float)
            if values.shape[1] >= 2 and row_bits(c) >= MIN_ROW_BITS:
                complete = values[~np.isnan(values).any(axis=1)]
                ids = table.index[~np.isnan(values).any(axis=1)]
                self.rows[c.client_id] = Patterns(complete, [f"row {i}" for i in ids])
            runs, what = [], []
            for f in c.schema.features:
                col = table[f.name].to_numpy(dtype=float)
                if f.discrete or len(col) <= max_column_run:
                    continue
                win = np.lib.stride_tricks.sliding_window_view(col, max_column_run + 1)
                keep = ~np.isnan(win).any(axis=1)
                runs.append(win[keep])
                what += [f"{max_column_run + 1} consecutive values of column '{f.name}'"] * int(keep.sum())
            if runs:
                self.runs[c.client_id] = Patterns(np.concatenate(runs), what)

    def __call__(self, client_id: str, message: Message) -> None:
        self.check(client_id, message)

    def check(self, client_id: str, message: Message) -> None:
        self.checked += 1
        parts: Iterable[tuple[str, np.ndarray]] = [
            *((f"array '{k}'", v.reshape(-1)) for k, v in message.arrays.items() if v.dtype.kind in "biuf"),
            ("config", np.array(numbers_in(message.config), dtype=float)),
        ]
        for where, flat in parts:
            for patterns in (self.rows.get(client_id), self.runs.get(client_id)):
                hit = patterns.find(flat) if patterns is not None else None
                if hit:
                    raise PrivacyViolation(f"client '{client_id}' message '{message.name}' {where} "
                                           f"contains {hit} of its private data")

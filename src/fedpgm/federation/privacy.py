"""Privacy audit: prove that no client message carries that client's raw rows or columns.

``PrivacyAudit(clients)`` checks a message against each client's private table (train and test
rows). Every client runs it on each of its replies before the reply leaves (``HandlerSet.handle``,
unless its policy turns it off), on every backend; tests also pass it to a federation as
``audit=`` to check the server's view, and experiments pass ``PrivacyAudit.beside_policies``
(only the clients that do not audit themselves). A message fails if any array, or the numbers anywhere in
its config (flattened in order), contain as a contiguous run:

==========================  =====================================================================
detector                    what it finds
==========================  =====================================================================
row                         a complete row, its columns in any order (rows with a continuous
                            column; all-discrete rows in their own order), as float64 or float32
row without the label       the same for the row's feature columns (a table sent without labels)
column run                  ``w`` consecutive values of one column in row order, or any affine
                            image ``a * x + b`` of them (scaled, shifted, negated, unit-changed)
sorted column               ``w`` consecutive order statistics of one column (a sorted copy) as
                            recorded, in either order, or an affine image of them
table                       ``k`` consecutive rows flattened row by row: tables whose single rows
                            identify no one (few possible values, e.g. a Bayesian network sample)
==========================  =====================================================================

``w`` and ``k`` come from the data's entropy, so a match by chance stays unlikely, and each
window is kept only if its own values carry that much (``window_information``: the sum of their
self-information, less the two largest terms for affine matches): a column run
needs ``max(max_column_run + 1, RUN_BITS / H + 2)`` values where ``H`` is the column's empirical
entropy in bits (a continuous column: 6 values; hours-per-week, H = 3.9: 15; a binary column:
left to the table detector, ``w`` would pass ``MAX_RUN_WIDTH``), a table ``TABLE_BITS / H_row``
rows. Rows are searched for only where a row carries at least ``MIN_ROW_BITS`` bits (the sum
of its columns' empirical entropies; 2^16 possible rows); below that the table detector stands
in. A row is also searched for only if its values are unlikely to turn up by chance in any of
the message's windows (``chance_bits``: a universal prior on numbers, less the orders a match in
any order allows, at least ``MIN_ROW_BITS`` + log2 of the rows searched + log2 of the message's
windows): a row of small counts is rare among borrowers but found in every list of child
indices (acs12's row of 60 hours, age 51, 1 minute to work, unmarried, birth quarter 2 is
in a 328-number list of a circuit's child indices as 51, 60, 0, 1, 2). A column run must
likewise take ``RUN_BITS`` to write as whole numbers up to a shift and a scale
(``shape_bits``: its values in steps of their own resolution, or of the matching tolerance,
less their minimum, over their common divisor). An affine copy is the same whole numbers, so
the message's matching values carry as much: a run of a column whose rows are sorted
(diamonds' price: 6078..6083) or that repeats few values (carat; an id repeated over each
organisation's rows) is an arithmetic progression, a list of cluster ids or of counts over n
(a leaf's probabilities) in any message, and is not searched for. Sorted runs (of distinct
values; ties are no information) need ``RUN_BITS`` from their gaps, ``gap_bits``, plus, for
exact values, log2 of the column's distinct values (where the run lies); affine copies need
``RUN_BITS`` from their shape too, and are searched for only in columns whose values are mostly
distinct (``MIN_DISTINCT``) and recorded to at least 2^20 steps of their resolution
(``MIN_RESOLUTION_BITS``): sorted values recorded to few digits are, in units of that resolution,
increasing integer lists, as every circuit structure's child lists are (breast cancer's
mean_smoothness, to 5 decimals, matched a structure's child indices once), so for such columns
only exact sorted copies are searched for. Within a column, each sorted window's gaps count at
the resolution its own values are recorded to (``window_resolution``): credit's DebtRatio holds
6-decimal ratios and, where income is missing, whole dollar amounts, and a run of those is as
common as a list of child indices. Resolutions are read to float32's rounding (``holds``), as
values are compared: InstInnovation's employment, thousands to 3 decimals stored through
float32, has sorted runs 0.123, 0.124, ..., 0.128 (a progression, in a fit's child lists as 1..6).

What it does not detect, by design or by cost: runs of a column that is mostly one value
(capital-gain, 92% zeros: a window of 16 holds too few amounts to tell it from a list of
quantiles), runs of a column whose rows are sorted by it or that repeat few values (their
shapes take under ``RUN_BITS``: progressions, short lists of small whole numbers), scaled or
shifted sorted copies of columns recorded to few digits (above), sorted runs of densely
repeated integer values (a range of ages), values perturbed by noise, rounding to fewer
digits than float32, non-affine transforms (log, ranks), subsets of rows or columns that are not
contiguous in the message, a column spread over non-adjacent positions (strided), the sorted
copy of a discrete column, rows whose values are partly missing, and anything derived from
several rows (means, counts, quantiles): those are the statistics the algorithms are meant to
send, and the client's policy (``fedpgm.data.policy``, ``min_rows``) bounds how few rows each may
come from.

A refusal says which settings to change if the run is honest (``REMEDY``): more rows behind each
value, or, for a public table, the audit off in the client's policy.

The search is vectorised (``fedpgm.federation.window_search``): each detector turns every window
of the message into its canonical form (as is, sorted, or standardised to mean 0 and std 1;
patterns are stored for ``x`` and ``-x``), hashes it with one dot product with random weights,
looks the hash up among the patterns' sorted hashes, and confirms candidates value by value.
"""

from __future__ import annotations

import logging
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy.special import gammaln

from fedpgm.data.partition import ClientData, Partition
from fedpgm.errors import FedpgmError
from fedpgm.federation.codec import Message
from fedpgm.federation.window_search import (Detector, both_signs, exact, sort_rows, standardise,
                                             standardise_increasing)

MIN_ROW_BITS = 16.0  # rows with fewer possible values than 2^16 identify no one
RUN_BITS = 48.0  # information a column run or a table window must carry
TABLE_BITS = 64.0
MAX_RUN_WIDTH = 16  # a column needing a longer run (H < 3 bits) is left to the table detector
MAX_TABLE_WIDTH = 256  # values in a table window
MAX_SORTED_WIDTH = 32  # an exact sorted run may need this many values where they lie densely
MIN_DISTINCT = 0.5  # sorted runs only for columns at least this fraction of whose values are distinct
MIN_RESOLUTION_BITS = 20.0  # ... and recorded to at least 2^20 steps across their range
EXACT_TOL, AFFINE_TOL = 1e-9, 1e-5
FLOAT32_NOISE = 2.0 ** -21  # relative error of a value that went through float32 a few times
REMEDY = ("if the run is honest, raise the client's min_rows or the learner's min_instances_slice (each value "
          "then comes from more rows), or, for a public table, set audit to false in the client's policy")


class PrivacyViolation(FedpgmError):
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


def self_information(values: np.ndarray) -> np.ndarray:
    """(n,) -log2 of each row's empirical frequency among the rows of ``values`` (n,) or (n, d)
    (NaN-free): how much a row says, a rare value much, the common one little."""
    if len(values) == 0:
        return np.zeros(0)
    _, inverse, counts = np.unique(values, axis=0, return_inverse=True, return_counts=True)
    return -np.log2(counts[inverse.reshape(-1)] / len(values))


def window_information(info: np.ndarray, width: int, affine: bool) -> np.ndarray:
    """(n - width + 1,) the information of each window of ``width`` consecutive items; with
    ``affine`` the two largest terms are dropped (a shift and a scale can make any two values
    fit). Windows of a skewed column (capital-gain: 15 zeros and one amount) carry little, and
    their standardised shape is found in any list of quantiles."""
    win = np.lib.stride_tricks.sliding_window_view(info, width)
    total = win.sum(axis=1)
    if affine:
        total = total - np.sort(win, axis=1)[:, -2:].sum(axis=1)
    return total


def holds(values: np.ndarray, d: int) -> np.ndarray:
    """Whether ``d`` decimals hold each value, to float32's rounding (``FLOAT32_NOISE``): values
    are compared as float32, so digits below it say nothing. InstInnovation's employment, in
    thousands to 3 decimals, was stored through float32 (0.1230000149 for 0.123); its runs are
    3-decimal values, not values known to 16 digits."""
    return np.abs(np.round(values, d) - values) <= np.maximum(1e-6 * 10.0 ** -d, np.abs(values) * FLOAT32_NOISE)


def number_bits(values: np.ndarray) -> np.ndarray:
    """Bits each value costs under a universal prior on numbers (an Elias-gamma code of its
    decimal mantissa, its sign and its number of decimals), NaN 0: how unlikely it is to turn up
    by chance in a message. Small whole numbers (indices, counts, cluster ids) are cheap, 0 costs
    one bit; a value that no 12 decimals hold costs 64."""
    a = np.abs(np.nan_to_num(values))
    decimals = np.full(a.shape, -1)
    for d in range(12, -1, -1):  # the fewest decimals that hold each value win
        decimals[holds(a, d)] = d
    mantissa = np.round(a * 10.0 ** np.maximum(decimals, 0))
    bits = np.where(decimals < 0, 64.0, np.minimum(64.0, 1.0 + 2.0 * np.log2(1.0 + mantissa)
                                                   + 2.0 * np.log2(1.0 + np.maximum(decimals, 0))))
    return np.where(np.isnan(values), 0.0, bits)


def chance_bits(rows: np.ndarray, any_order: bool) -> np.ndarray:
    """(n,) how unlikely each row of ``rows`` (n, d) is to turn up by chance in a message: the
    sum of its values' ``number_bits``, less, for a match in any order, log2 of the number of
    distinct orders of its values. A row of credit counts, (0, 0, 1, 1, 2, 2, 3), is rare among
    borrowers (``row_bits``) but common among a circuit's child indices: 21.3 - 9.3 bits."""
    bits = number_bits(rows).sum(axis=1)
    if any_order:  # log2 of d! / (product of the tied values' counts!), with d! / prod k over runs
        s = np.sort(rows, axis=1)  # (NaN last, each its own run)
        at = np.arange(s.shape[1])
        start = np.maximum.accumulate(np.where(np.c_[np.ones(len(s), bool), s[:, 1:] != s[:, :-1]], at, 0), axis=1)
        ties = np.log(at - start + 1.0).sum(axis=1)  # sum over runs of log(count!)
        bits -= (gammaln((~np.isnan(rows)).sum(axis=1) + 1.0) - ties) / np.log(2)
    return bits


def shape_bits(windows: np.ndarray) -> np.ndarray:
    """(n,) bits it takes to write each window's shape up to ``a * x + b``, ``windows`` (n, w) as
    matched (float32-rounded): its values as whole numbers ``k = (x - min) / step``, ``step`` the
    coarser of the window's own resolution (``window_resolution``) and the affine matching
    tolerance (``AFFINE_TOL`` of its std), neighbours in sorted order that one message value
    matches both (``2 AFFINE_TOL`` std apart) counted as equal, divided by their greatest common
    divisor, in the cheaper of two codes: each number under a universal prior (``1 + 2 log2(1 +
    k)``: zeros and small numbers are cheap) or all w below the largest (``w log2(max + 1)``); the
    cheaper of ``x`` and ``-x``. An affine copy of a window has the same whole numbers, so a window
    whose shape is cheap is matched by honest messages by chance: diamonds is sorted by price, and
    its prices 6078..6083 are the progression 0..5 (child indices), 5294, 5294, 5296, 5296, 5297,
    5299 are 0, 0, 2, 2, 3, 5 (a leaf's probabilities, counts over n); a run of two carat values
    is a list of cluster ids; one whole-dollar amount among five close ratios (credit's
    DebtRatio) is 1, 0, 0, 0, 0, 0; cms_patient_experience's org_pac_id (an id repeated over an
    organisation's 6 rows) has runs such as 1557267069, 1759293111 (x 5), 1759293954 (x 4),
    whose last two ids lie within the tolerance (or round to one float32): 1, 0, ..., 0, a leaf's
    probabilities (0.98, then 0.0039 nine times)."""
    if len(windows) == 0:
        return np.zeros(0)
    tol = AFFINE_TOL * windows.std(axis=1, keepdims=True)
    step = np.maximum(window_resolution(windows), tol)
    order = np.argsort(windows, axis=1)
    gaps = np.diff(np.take_along_axis(windows, order, axis=1), axis=1)
    rises = np.cumsum(np.where(gaps <= 2.0 * tol, 0.0, np.round(gaps / step)), axis=1)
    k = np.zeros(windows.shape, dtype=np.int64)
    np.put_along_axis(k, order, np.c_[np.zeros(len(k)), rises].astype(np.int64), axis=1)
    k //= np.maximum(np.gcd.reduce(k, axis=1), 1)[:, None]
    top = k.max(axis=1, keepdims=True)
    each = [(1.0 + 2.0 * np.log2(1.0 + v)).sum(axis=1) for v in (k, top - k)]
    return np.minimum(np.minimum(*each), windows.shape[1] * np.log2(1.0 + top[:, 0]))


def entropy_bits(values: np.ndarray) -> float:
    """Empirical entropy (bits) of the rows of ``values`` (n,) or (n, d), NaN-free."""
    if len(values) == 0:
        return 0.0
    _, counts = np.unique(values, axis=0, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def row_bits(values: np.ndarray) -> np.ndarray:
    """(n,) what each row of ``values`` (n, d) says: the sum over its observed values of their
    self-information within their column."""
    bits = np.zeros(len(values))
    for col in values.T:
        seen = ~np.isnan(col)
        bits[seen] += self_information(col[seen])
    return bits


def rows_detector(values: np.ndarray, ids, any_order: bool, label: str, margin: np.ndarray) -> Detector | None:
    complete = ~np.isnan(values).any(axis=1)
    if values.shape[1] < 2 or not complete.any():
        return None
    pats = as32(values[complete])
    canon = sort_rows if any_order else exact
    what = [f"{label} {i}" for i in np.asarray(ids)[complete]]
    return Detector(canon(pats), what, canon, EXACT_TOL, margin=margin[complete])


def column_windows(col: np.ndarray, width: int) -> np.ndarray:
    win = np.lib.stride_tricks.sliding_window_view(col, width)
    return win[~np.isnan(win).any(axis=1)]


def resolution(values: np.ndarray) -> float:
    """The step a column is recorded to: 10^-d for the fewest decimals d (0..12) that hold
    (``holds``) all its values but 1% or 2 of them (wine's color_intensity, to 2 decimals, holds
    one 9.899999), else (full floating-point data) its range times 2^-52."""
    for d in range(13):
        if np.sum(~holds(values, d)) <= max(2, 0.01 * len(values)):
            return 10.0 ** -d
    return max(float(np.ptp(values)), 1e-300) * 2.0 ** -52


def gap_bits(win: np.ndarray, quantum: float) -> np.ndarray:
    """(n,) information in each sorted window's shape: the sum over its gaps of log2(1 + gap /
    quantum), ``quantum`` the column's resolution (``resolution``). Where values recorded to
    few digits are dense, a sorted run is a list of small integers (in quanta), as found in any
    index array, and is no evidence of a copy."""
    return np.log2(1.0 + np.diff(win, axis=1) / quantum).sum(axis=1)


def window_resolution(win: np.ndarray) -> np.ndarray:
    """(n, 1) the step each window's own values are recorded to: 10^-d for the fewest decimals d
    (0..12) that hold them all (``holds``). A column may mix resolutions (credit's DebtRatio:
    ratios to 6 decimals, and whole dollar amounts where income is missing); a run of whole
    numbers in it carries the information of a list of integers, such as a circuit's child
    indices, not of a run of 6-decimal values."""
    steps = np.full(len(win), 1e-12)
    for d in range(12, -1, -1):  # coarsest last: the fewest decimals that hold a window win
        steps[holds(win, d).all(axis=1)] = 10.0 ** -d
    return steps[:, None]


class ClientPatterns:
    """The detectors of one client's table."""

    def __init__(self, client: ClientData, max_column_run: int) -> None:
        table = pd.concat([f for f in (client.train, client.test) if f is not None])
        values = as32(table.to_numpy(dtype=float))
        schema = client.schema
        discrete = np.array([f.discrete for f in schema.features])
        self.detectors: list[Detector] = []
        self.add_rows(values, table.index, schema, discrete)
        runs: dict[int, tuple[list, list]] = {}
        sorted_runs: dict[int, tuple[list, list]] = {}
        exact_sorted_runs: dict[int, tuple[list, list]] = {}
        for j, f in enumerate(schema.features):
            col = values[:, j]
            observed = col[~np.isnan(col)]
            h = entropy_bits(observed)
            # (+ 2: an affine copy is matched up to a shift and a scale, two values' worth)
            width = max(max_column_run + 1, int(np.ceil(RUN_BITS / h)) + 2) if h > 0 else MAX_RUN_WIDTH + 1
            if width > MAX_RUN_WIDTH or len(observed) < width:
                continue
            win = np.lib.stride_tricks.sliding_window_view(col, width)
            info = np.full(len(col), np.nan)
            info[~np.isnan(col)] = self_information(observed)
            rich = window_information(info, width, affine=True) >= RUN_BITS  # (NaN windows drop too)
            win = win[rich][shape_bits(win[rich]) >= RUN_BITS]
            pats, what = runs.setdefault(width, ([], []))
            pats.append(win)
            what += [f"{width} consecutive values of column '{f.name}' (or an affine copy)"] * len(win)
            srt = np.unique(observed)  # strictly increasing order statistics (ties are no information)
            if f.discrete or len(srt) < MAX_RUN_WIDTH:
                continue
            quantum = resolution(srt)
            where = np.log2(len(srt))  # an exact value also says where in the column it lies
            for group, affine, bits0 in ((sorted_runs, True, 0.0), (exact_sorted_runs, False, where)):
                if affine and (len(srt) < MIN_DISTINCT * len(observed)
                               or np.log2((srt[-1] - srt[0]) / quantum) < MIN_RESOLUTION_BITS):
                    continue
                per_gap = gap_bits(srt[None, :], quantum)[0] / (len(srt) - 1)
                need = max(RUN_BITS - bits0, 1.0)
                width = min(MAX_RUN_WIDTH, max(max_column_run + 1, int(np.ceil(1.5 * need / per_gap)) + 1))
                # (exact copies: also longer windows, where values lie densely and gaps say little)
                for w in ([width] if affine else sorted({width, MAX_SORTED_WIDTH})):
                    if len(srt) < w:
                        continue
                    win = column_windows(srt, w)
                    rich = bits0 + gap_bits(win, np.maximum(window_resolution(win), quantum)) >= RUN_BITS
                    win = win[rich & (shape_bits(win) >= RUN_BITS)] if affine else win[rich]
                    pats, what = group.setdefault(w, ([], []))
                    pats.append(win)
                    what += [f"{w} consecutive sorted values of column '{f.name}'"
                             + (" (or an affine copy)" if affine else "")] * len(win)
        for groups, canon in ((runs, standardise), (sorted_runs, standardise_increasing)):
            for windows, what in groups.values():
                self.detectors.append(Detector(both_signs(np.concatenate(windows), canon), what + what, canon,
                                               AFFINE_TOL))
        for listed, what in exact_sorted_runs.values():  # as recorded, in either order
            stacked = np.concatenate(listed)
            self.detectors.append(Detector(np.concatenate([stacked, stacked[:, ::-1]]), what + what, exact,
                                           EXACT_TOL))

    def add_rows(self, values: np.ndarray, ids, schema, discrete: np.ndarray) -> None:
        """Row detectors where rows carry ``MIN_ROW_BITS`` (the sum of their columns' empirical
        entropies), for each row that does itself (``row_bits``), else a table detector of as many
        consecutive rows as carry ``TABLE_BITS``."""
        label = schema.index(schema.label) if schema.label is not None else None
        variants = [(np.arange(values.shape[1]), "row", "rows")]
        if label is not None and values.shape[1] > 2:
            variants.append((np.array([j for j in range(values.shape[1]) if j != label]),
                             "row without the label of", "rows without the label"))
        for cols, name, plural in variants:
            sub = values[:, cols]
            bits = sum(entropy_bits(sub[~np.isnan(sub[:, i]), i]) for i in range(len(cols)))
            if bits >= MIN_ROW_BITS:
                any_order = not discrete[cols].all()
                # a row of common values (zeros, say) identifies no one; one of small whole numbers
                # in any order is found in every index list: a match by chance of any of the rows
                # searched for, anywhere in the message, must stay unlikely (the message's
                # windows are counted when it is searched: ``Detector``'s margin)
                rich = np.flatnonzero(row_bits(sub) >= MIN_ROW_BITS)
                margin = chance_bits(sub[rich], any_order) - MIN_ROW_BITS - np.log2(max(1, len(rich)))
                rich, margin = rich[margin >= 0], margin[margin >= 0]
                det = rows_detector(sub[rich], np.asarray(ids)[rich], any_order, name, margin)
                if det is not None:
                    self.detectors.append(det)
                continue
            complete = sub[~np.isnan(sub).any(axis=1)]
            h = entropy_bits(complete)
            k = int(np.ceil(TABLE_BITS / h)) if h > 0 else 0
            if k < 2 or k * len(cols) > MAX_TABLE_WIDTH or len(complete) < k:
                continue
            win = column_windows(complete.reshape(-1), k * len(cols))[::len(cols)]
            win = win[window_information(self_information(complete), k, affine=False) >= TABLE_BITS]
            what = [f"{k} consecutive {plural} (a table)"] * len(win)
            self.detectors.append(Detector(win, what, exact, EXACT_TOL))

    def find(self, parts: list[tuple[str, np.ndarray]]) -> tuple[str, str] | None:
        """(where, what) for the first part of a message (named flat arrays) holding a pattern, or
        None. The parts are searched as one vector with a NaN between them: a window across
        two parts holds the NaN and matches nothing, and one search instead of one per array and
        detector (a concept model's reply has dozens of small arrays; the audit took half of
        an F-CM round) costs the same per value. Only a hit is traced back to its part."""
        parts = [(where, as32(flat)) for where, flat in parts if flat.size]
        if not parts:
            return None
        gap = np.full(1, np.nan)
        joined = np.concatenate([x for _, flat in parts for x in (flat, gap)][:-1])
        for d in self.detectors:
            if d.find(joined):
                for where, flat in parts:
                    hit = d.find(flat, message_size=len(joined))
                    if hit:
                        return where, hit
        return None


class PrivacyAudit:
    """Audit hook: ``audit(client_id, message)`` raises ``PrivacyViolation`` on a leak."""

    def __init__(self, clients: Partition | Sequence[ClientData], max_column_run: int = 5) -> None:
        clients = clients.clients if isinstance(clients, Partition) else clients
        self.max_column_run = max_column_run
        self.checked = 0
        self.patterns = {c.client_id: ClientPatterns(c, max_column_run) for c in clients}

    @classmethod
    def beside_policies(cls, clients: Partition | Sequence[ClientData]) -> "PrivacyAudit":
        """An experiment's audit of what its clients do not audit themselves: it checks the
        replies of clients whose policy turns the audit off and counts (``checked``) every reply.
        The others ran this same check on each reply before it left (``HandlerSet.handle``); a
        second pass on the server's side doubled the audit's cost (half an F-CM round)."""
        clients = clients.clients if isinstance(clients, Partition) else clients
        return cls([c for c in clients if not c.policy.audit])

    def __call__(self, client_id: str, message: Message) -> None:
        self.check(client_id, message)

    def check(self, client_id: str, message: Message, detail: bool = True) -> None:
        """Raise ``PrivacyViolation`` if ``message`` carries the client's rows or column runs;
        ``detail`` False (a client's own audit, whose refusal goes to the server): the refusal
        names the array but not what matched (a row id or which columns matched would answer a
        server's guess), which goes to this process's log."""
        self.checked += 1
        patterns = self.patterns.get(client_id)
        if patterns is None:
            return
        parts: Iterable[tuple[str, np.ndarray]] = [
            *((f"array '{k}'", v.reshape(-1)) for k, v in message.arrays.items() if v.dtype.kind in "biuf"),
            ("config", np.array(numbers_in(message.config), dtype=float)),
        ]
        found = patterns.find(list(parts))
        if found:
            where, hit = found
            if not detail:
                logging.getLogger("fedpgm").warning("client '%s': the privacy audit found %s in %s", client_id, hit,
                                                    where)
                hit = "rows or column values"
            raise PrivacyViolation(f"client '{client_id}' message '{message.name}' {where} "
                                   f"contains {hit} of its private data; {REMEDY}")

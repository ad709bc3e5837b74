"""A hostile coordinator gets no rows from an NGM ``fit``: every quantile is a block mean.

The attack: 101 interpolated quantiles of n <= 101 values are a linear system in the sorted
values that a least-squares solve inverts exactly (2,730 of 2,730 values of a 91-row client).
The client now sends k = min(101, n // min_rows) block means per column instead.
"""

import numpy as np
import pandas as pd
import pytest

from fedpgm.data import ClientData
from fedpgm.data.policy import PolicyRefusal
from fedpgm.data.schema import Feature, Schema
from fedpgm.federation.codec import Message
from fedpgm.federation.handlers import ClientContext
from fedpgm.federation.privacy import numbers_in
from fedpgm.ngm.client import HANDLERS

COLUMNS = [f"x{j}" for j in range(12)]
SCHEMA = Schema(tuple(Feature(c, "continuous") for c in COLUMNS))
EDGES = [[a, b] for a, b in zip(COLUMNS, COLUMNS[1:])]
SETTINGS = {"hidden": 16, "epochs": 10, "seed": 0}
OLD_LEVELS = np.linspace(0.005, 0.995, 101)  # what the client used to send: np.quantile(v, OLD_LEVELS)


def client(n: int, seed: int = 0) -> ClientData:
    """``n`` rows of 12 continuous columns, a chain x0 -> x1 -> ... (each a mix of scales)."""
    rng = np.random.default_rng(seed)
    x = np.empty((n, len(COLUMNS)))
    x[:, 0] = rng.normal(40, 12, n)
    for j in range(1, len(COLUMNS)):
        x[:, j] = 0.7 * x[:, j - 1] + rng.lognormal(0, 1, n)
    frame = pd.DataFrame(x, columns=COLUMNS).rename_axis("row_id")
    return ClientData(f"client-{n}", SCHEMA, frame)


def fit_request() -> Message:
    return Message("fit", config={"columns": COLUMNS, "edges": EDGES, "settings": SETTINGS})


def interpolation_matrix(n: int, levels: np.ndarray) -> np.ndarray:
    """(len(levels), n): np.quantile's linear interpolation of n sorted values at ``levels``."""
    M = np.zeros((len(levels), n))
    h = levels * (n - 1)
    lo = np.floor(h).astype(int)
    hi = np.minimum(lo + 1, n - 1)
    M[np.arange(len(levels)), lo] += 1 - (h - lo)
    M[np.arange(len(levels)), hi] += h - lo
    return M


def block_matrix(n: int, k: int) -> np.ndarray:
    """(k, n): the means of k contiguous blocks of n sorted values (np.array_split's sizes)."""
    M = np.zeros((k, n))
    for i, block in enumerate(np.array_split(np.arange(n), k)):
        M[i, block] = 1 / len(block)
    return M


def hits(values: np.ndarray, guesses: np.ndarray) -> int:
    """How many of ``values`` some guess equals to 1e-9 relative."""
    guesses = np.sort(np.asarray(guesses, dtype=float))
    if guesses.size == 0:
        return 0
    i = np.clip(np.searchsorted(guesses, values), 1, len(guesses) - 1)
    near = np.minimum(np.abs(guesses[i] - values), np.abs(guesses[i - 1] - values))
    return int((near <= 1e-9 * np.abs(values)).sum())


def test_the_attack_solves_old_interpolated_quantiles():
    """Control: the solver below recovers every value of a 91-row column from the old reply."""
    v = np.sort(client(91).train["x0"].to_numpy())
    recovered = np.linalg.lstsq(interpolation_matrix(91, OLD_LEVELS), np.quantile(v, OLD_LEVELS), rcond=None)[0]
    assert hits(v, recovered) == 91


@pytest.mark.parametrize("n", [91, 30])
def test_fit_reply_holds_no_client_value(n, tmp_path):
    data = client(n)
    min_rows = data.policy.min_rows
    reply = HANDLERS.handle(fit_request(), ClientContext(data.client_id, data, tmp_path))
    doc = reply.config["model"]
    k = n // min_rows
    stats = doc["layout"]["stats"]
    assert all(len(stats[c]["quantiles"]) <= k for c in COLUMNS)
    residuals = [q for by in doc["residuals"].values() for q in by.values()]
    assert residuals and all(len(q) <= k for q in residuals)
    values = data.train[COLUMNS].to_numpy().ravel()  # (n * 12,) every value the client holds
    sent = np.concatenate([numbers_in(reply.config)] + [a.ravel() for a in reply.arrays.values()])
    assert hits(values, sent) == 0  # no number of the reply is a value of the client
    solved = 0
    for c in COLUMNS:  # the attacker knows the scheme: a least-squares solve of the block means
        q = np.asarray(stats[c]["quantiles"])
        recovered = np.linalg.lstsq(block_matrix(n, len(q)), q, rcond=None)[0]
        solved += hits(data.train[c].to_numpy(), recovered)
    assert solved == 0
    print(f"{n} rows: {k} quantiles per column, {hits(values, sent)} of {values.size} values in the reply")


def test_a_client_below_min_rows_refuses(tmp_path):
    data = client(9)
    ctx = ClientContext(data.client_id, data, tmp_path)
    for request in (Message("describe"), Message("graph"), Message("graph_votes", config={"columns": COLUMNS}),
                    fit_request(), Message("stitch")):
        with pytest.raises(PolicyRefusal, match="min_rows is 10"):
            HANDLERS.handle(request, ctx)
    big = client(91)
    big.test = client(9, seed=1).train  # stitch metrics would average 9 test rows
    with pytest.raises(PolicyRefusal, match="metrics of 'x0' of 9 rows"):
        HANDLERS.handle(Message("stitch", config={"targets": ["x0"]}), ClientContext(big.client_id, big, tmp_path))

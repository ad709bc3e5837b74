"""A hostile coordinator crafts the circuit it sends for horizontal FedPC's EM refinement
(``fedpc.client.em``) so that EM's statistics read rows: a root sum with one child per guessed
row, each a product of narrow Gaussians at that row's values. Each child's edge count is then
the number of the client's rows at that point (a membership oracle, a histogram of single rows)
and each leaf's statistics are one row's values. The worst case is tested: the coordinator's
guesses are the client's rows themselves, plus as many rows it does not hold.

Without the floor (``min_rows`` 1) the reply gives every held row away; under the default
policy every edge below ``min_rows`` rows sends its sum's current weight times the sum's flow
(``circuits.em.floor_edges``), and every leaf below it is left out (``floored``), so nothing in
the reply depends on which guesses the client holds beyond the root's total flow.
"""

import numpy as np
import pandas as pd
import pytest

from fedpgm.circuits.io import to_payload
from fedpgm.circuits.structure import Circuit
from fedpgm.data.partition import ClientData
from fedpgm.data.policy import ClientPolicy
from fedpgm.data.schema import Feature, Schema
from fedpgm.federation.codec import Message
from fedpgm.federation.handlers import ClientContext
from fedpgm.fedpc.client import HANDLERS

ROWS, COLUMNS = 60, 3


@pytest.fixture(scope="module")
def table():
    rng = np.random.default_rng(0)
    held = rng.normal(size=(ROWS, COLUMNS))
    other = rng.normal(size=(ROWS, COLUMNS))  # rows the client does not hold
    schema = Schema(tuple(Feature(f"x{j}", "continuous") for j in range(COLUMNS)))
    return held, other, schema


def crafted(schema: Schema, guesses: np.ndarray) -> Circuit:
    """A root sum over one product per guessed row of Gaussians of std 1e-3 (the least a Gaussian leaf takes) at its values."""
    circuit = Circuit(schema)
    children = [circuit.product([circuit.leaf(j, "gaussian", {"mean": np.array(v), "std": np.array(1e-3)})
                                 for j, v in enumerate(row)]) for row in guesses]
    circuit.sum(children, np.full(len(children), 1.0 / len(children)))
    return circuit


def reply(held, schema, circuit, policy: ClientPolicy, tmp_path) -> Message:
    frame = pd.DataFrame(held, columns=schema.names)
    ctx = ClientContext("client-0", ClientData("client-0", schema, frame, None, {}, policy), tmp_path)
    doc, tensors = to_payload(circuit)
    return HANDLERS.handle(Message("em", {f"circuit/{k}": v for k, v in tensors.items()},
                                   {"circuit": doc, "holdout": 0.0, "seed": 0}), ctx)


def test_a_crafted_circuit_reads_rows_only_without_the_floor(table, tmp_path):
    held, other, schema = table
    guesses = np.concatenate([held, other])
    circuit = crafted(schema, guesses)
    root = f"stats/sum/{len(circuit.nodes) - 1}"
    open_ = reply(held, schema, circuit, ClientPolicy(min_rows=1, audit=False), tmp_path)
    counts = open_.arrays[root]
    # membership of every guess (an edge no row uses rests on none: its sum's weight times its flow)
    assert np.allclose(counts[:ROWS], 1.0) and np.allclose(counts[ROWS:], ROWS / len(guesses))
    stats = np.stack([open_.arrays[k] for k in open_.arrays if k.startswith("stats/leaf/")])  # (w, w x, w x^2)
    used = stats[stats[:, 0] > 0.5]
    assert len(used) == ROWS * COLUMNS  # each leaf of a held row: that row's value, exactly
    assert np.allclose(np.sort(used[:, 1] / used[:, 0]), np.sort(held.ravel()), rtol=1e-6)

    floored = reply(held, schema, circuit, ClientPolicy(), tmp_path)
    assert not [k for k in floored.arrays if k.startswith("stats/leaf/")]
    assert np.allclose(floored.arrays[root], ROWS / len(guesses))  # the old weights times the flow
    shuffled = reply(other, schema, circuit, ClientPolicy(), tmp_path)  # a client holding the other rows
    assert np.array_equal(shuffled.arrays[root], floored.arrays[root])


def test_a_categorical_leaf_whose_states_hold_one_row_each_sends_no_rows_weight(tmp_path):
    """A category held by one row (an id-like column) counts that row's posterior weight, a
    function of its other values: with two Gaussians at -1 and +1 beside a categorical leaf over
    such a column, the second child's per-category counts are sigmoid(2 v) of each row's v, so
    without the floor every v is read back exactly. Under the default policy each state below
    ``min_rows`` rows (Kish's count) takes the leaf's probability times its weight: all equal."""
    rng = np.random.default_rng(1)
    n = 40
    v = rng.normal(size=n)
    schema = Schema((Feature("c", "categorical", tuple(range(n))), Feature("v", "continuous")))
    frame = pd.DataFrame({"c": np.arange(n), "v": v})
    circuit = Circuit(schema)
    children = [circuit.product([circuit.leaf(0, "categorical", {"probs": np.full(n, 1.0 / n)}),
                                 circuit.leaf(1, "gaussian", {"mean": np.array(m), "std": np.array(1.0)})])
                for m in (-1.0, 1.0)]
    circuit.sum(children, np.array([0.5, 0.5]))
    leaf = f"stats/leaf/{circuit.nodes[children[1]].children[0]}"

    def counts(policy: ClientPolicy) -> np.ndarray:
        ctx = ClientContext("client-0", ClientData("client-0", schema, frame, None, {}, policy), tmp_path)
        doc, tensors = to_payload(circuit)
        return HANDLERS.handle(Message("em", {f"circuit/{k}": t for k, t in tensors.items()},
                                       {"circuit": doc, "holdout": 0.0, "seed": 0}), ctx).arrays[leaf]

    read = np.log(counts(ClientPolicy(min_rows=1, audit=False)) / (1 - counts(ClientPolicy(min_rows=1, audit=False))))
    np.testing.assert_allclose(read / 2, v, atol=1e-5)  # every row's v, from its category's count
    floored = counts(ClientPolicy())
    assert np.allclose(floored, floored.mean()) and floored.sum() == pytest.approx((1 / (1 + np.exp(-2 * v))).sum())

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
from fedpgm.circuits.weighted import MIN_STD
from fedpgm.circuits.structure import Circuit
from fedpgm.data.partition import ClientData
from fedpgm.data.policy import ClientPolicy
from fedpgm.data.schema import Feature, Schema
from fedpgm.federation.codec import Message
from fedpgm.federation.handlers import ClientContext
from fedpgm.fedpc.client import EM_HOLDOUT, HANDLERS, holdout_rows

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
                                   {"circuit": doc}), ctx)


def test_a_crafted_circuit_reads_rows_only_without_the_floor(table, tmp_path):
    held, other, schema = table
    guesses = np.concatenate([held, other])
    circuit = crafted(schema, guesses)
    root = f"stats/sum/{len(circuit.nodes) - 1}"
    open_ = reply(held, schema, circuit, ClientPolicy(min_rows=1, audit=False), tmp_path)
    counts = open_.arrays[root]
    used = ~holdout_rows(ROWS, EM_HOLDOUT, 1)  # (the rows the client does not hold out to score passes)
    assert np.allclose(counts[:ROWS][used], 1.0) and np.allclose(counts[:ROWS][~used], 0.0)
    assert np.allclose(counts[ROWS:], 0.0)  # membership of every guess
    stats = np.stack([open_.arrays[k] for k in open_.arrays if k.startswith("stats/leaf/")])  # (w, w x, w x^2)
    read = stats[stats[:, 0] > 0.5]
    assert len(read) == used.sum() * COLUMNS  # each leaf of a row: that row's value, exactly
    assert np.allclose(np.sort(read[:, 1] / read[:, 0]), np.sort(held[used].ravel()), rtol=1e-6)

    floored = reply(held, schema, circuit, ClientPolicy(), tmp_path)
    assert not [k for k in floored.arrays if k.startswith("stats/leaf/")]
    used = ~holdout_rows(ROWS, EM_HOLDOUT, 10)
    assert np.allclose(floored.arrays[root], used.sum() / len(guesses))  # the old weights times the flow
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
                                       {"circuit": doc}), ctx).arrays[leaf]

    used = ~holdout_rows(n, EM_HOLDOUT, 1)  # (the rows the client does not hold out to score passes)
    p = counts(ClientPolicy(min_rows=1, audit=False))[used]
    np.testing.assert_allclose(np.log(p / (1 - p)) / 2, v[used], atol=1e-5)  # every row's v, from its count
    floored = counts(ClientPolicy())
    used = ~holdout_rows(n, EM_HOLDOUT, 10)
    assert np.allclose(floored, floored.mean())
    assert floored.sum() == pytest.approx((1 / (1 + np.exp(-2 * v[used]))).sum())


def test_a_split_with_one_low_edge_or_state_is_sent_whole_as_the_current_weights(tmp_path):
    """Found by review: a low edge or state sent as the current weight times the total, beside
    its siblings' exact counts, gives its own count as the total less theirs (one row's
    posterior, here a function of its income). Now the whole split is the current weights times
    the total; and a column observed in fewer than ``min_rows`` rows sends no std floor of its
    values (the floor of 2 observed incomes was their distance)."""
    rng = np.random.default_rng(2)
    n = 150
    income = rng.normal(50, 20, n)
    flag = np.zeros(n)
    target = int(np.flatnonzero(~holdout_rows(n, EM_HOLDOUT, 10))[0])  # (a row the client does not hold out)
    flag[target] = 1
    sparse = np.full(n, np.nan)
    sparse[[3, 7]] = [10.0, 3096.5]
    schema = Schema((Feature("income", "continuous"), Feature("flag", "binary", (0, 1)),
                     Feature("sparse", "continuous")))
    frame = pd.DataFrame({"income": income, "flag": flag, "sparse": sparse})
    circuit = Circuit(schema)
    children = []
    for mean in (0.0, 100.0):
        flag_leaf = circuit.leaf(1, "bernoulli", {"p": np.array(0.5)})
        children.append(circuit.product([circuit.leaf(0, "gaussian", {"mean": np.array(mean), "std": np.array(50.0)}),
                                         flag_leaf, circuit.leaf(2, "gaussian", {"mean": np.array(0.0),
                                                                                 "std": np.array(1.0)})]))
    narrow = circuit.product([circuit.leaf(0, "gaussian", {"mean": np.array(income[target]), "std": np.array(1e-3)}),
                              circuit.leaf(1, "bernoulli", {"p": np.array(0.5)}),
                              circuit.leaf(2, "gaussian", {"mean": np.array(0.0), "std": np.array(1.0)})])
    weights = np.array([0.45, 0.45, 0.1])
    circuit.sum(children + [narrow], weights)
    ctx = ClientContext("client-0", ClientData("client-0", schema, frame, None, {}, ClientPolicy()), tmp_path)
    doc, tensors = to_payload(circuit)
    out = HANDLERS.handle(Message("em", {f"circuit/{k}": t for k, t in tensors.items()}, {"circuit": doc}), ctx)
    root = out.arrays[f"stats/sum/{len(circuit.nodes) - 1}"]
    np.testing.assert_allclose(root / root.sum(), weights)  # (the narrow edge holds one row: the split is hidden)
    flag_stats = out.arrays[f"stats/leaf/{circuit.nodes[children[1]].children[1]}"]  # [rows, ones]
    assert flag_stats[1] == pytest.approx(0.5 * flag_stats[0])  # (one row has the flag: the leaf's p times its weight)
    assert out.arrays["floors"][2] == MIN_STD

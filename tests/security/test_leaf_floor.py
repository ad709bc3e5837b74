"""Items 2 and 3 of the security issue "a hostile coordinator gets no rows": a coordinator's learner
settings must not make a client's circuit carry its rows. A client passes its policy's ``min_rows``
to every learner as ``min_leaf_rows``, so that each leaf parameter (fitted, refitted by EM,
trained by Adam, a histogram's edges) is a statistic of at least that many rows.

Each learner is fitted twice on the same table, without the floor (1: the attack, which must find
rows, so the test shows it works) and with it (10: it must find none): training cell values found
verbatim (to 1e-9 relative; 2^-23, float32's, for the float32 arrays of dense circuits) among all
numbers of the payload a client sends (``to_payload``), and rows equal to a leaf group (the
univariate leaves of one product, or one unit of a dense leaf region) on 3 or more columns.

The table: breast cancer's ten "mean" columns, 250 rows for training (a seeded shuffle), the rest
for the test log-likelihoods printed beside (the floor's cost, or gain). Its values are recorded to
3-5 significant digits, so a mean of 10 rows or a histogram edge on the floor's 10^k grid sometimes
equals one by chance (46 of 2,500 cells for the floored histograms, every one a grid point or a
mean): each cell is multiplied by 1 + u 1e-7 (u uniform in [-1, 1]; zeros stay) so that a match is
a copy. Values that 10 rows share (zeros) are category-like, not identifying, and not counted. The
latent tree's discrete columns are left out of the count (their codes are in any payload); its
tables are floored by ``floor_cpts`` and EM's sums, tested below with Adam's projection.
"""

import copy

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from fedpgm.circuits.chow_liu import chow_liu
from fedpgm.circuits.dense import DenseCircuit
from fedpgm.circuits.dense_estimator import DensePC
from fedpgm.circuits.em import em
from fedpgm.circuits.estimator import LearnSPN, RatSPN
from fedpgm.circuits.io import to_payload
from fedpgm.circuits.latent_tree import floor_cpts
from fedpgm.circuits.leaves import Histogram, grid_edges, histogram_edges
from fedpgm.circuits.structure import Circuit, Leaf, Product
from fedpgm.data.schema import Feature, Schema

FLOOR = 10
DISCRETE = 4  # columns coded in 3 quantile bins for the latent tree


@pytest.fixture(scope="module")
def table():
    data = load_breast_cancer().data[:, :10]
    rng = np.random.default_rng(0)
    data = data * (1 + 1e-7 * rng.uniform(-1, 1, size=data.shape))
    order = rng.permutation(len(data))
    return data[order[:250]], data[order[250:]]


def coded(X: np.ndarray, train: np.ndarray) -> np.ndarray:
    """X with its first ``DISCRETE`` columns as codes 0, 1, 2 of the training rows' terciles."""
    out = X.copy()
    for j in range(DISCRETE):
        out[:, j] = np.searchsorted(np.quantile(train[:, j], [1 / 3, 2 / 3]), X[:, j])
    return out


MIXED = Schema(tuple(Feature(f"c{j}", "categorical", ("low", "mid", "high")) for j in range(DISCRETE))
               + tuple(Feature(f"x{j}", "continuous") for j in range(DISCRETE, 10)))
LEARNERS = {  # name -> (the floor m -> an estimator)
    "learnspn histogram": lambda m: LearnSPN(leaf="histogram", min_instances_slice=10, min_leaf_rows=m),
    "ratspn default": lambda m: RatSPN(min_leaf_rows=m),
    # (the 64 inputs and 100 EM iterations; one repetition of depth 1 keeps it to seconds)
    "ratspn 64 inputs, 100 EM": lambda m: RatSPN(n_inputs=64, em_iterations=100, depth=1, repetitions=1,
                                                 min_leaf_rows=m),
    "learnspn EM": lambda m: LearnSPN(min_instances_slice=10, em_iterations=10, min_leaf_rows=m),
    "learnspn latent tree, stepwise EM": lambda m: LearnSPN(min_instances_slice=10, leaf_model="latent-tree",
                                                            latent_states=6, em_iterations=5, em_batch_size=64,
                                                            min_leaf_rows=m),
    "pd batch EM": lambda m: DensePC(structure="binary-trees", units=16, depth=2, repetitions=2, epochs=40,
                                     method="batch", max_var=1e7, device="cpu", min_leaf_rows=m),
}


def identifying(X: np.ndarray) -> np.ndarray:
    """(rows, columns) mask of the cells worth finding: nonzero and held by fewer than FLOOR rows."""
    out = X != 0
    for j in range(X.shape[1]):
        _, inverse, counts = np.unique(X[:, j], return_inverse=True, return_counts=True)
        out[:, j] &= counts[inverse] < FLOOR
    return out


def found(cells: np.ndarray, numbers: np.ndarray, rtol: float) -> np.ndarray:
    """(cells,) whether each cell lies within ``rtol`` (relative) of one of ``numbers``."""
    nums = np.unique(numbers[np.isfinite(numbers)])
    i = np.clip(np.searchsorted(nums, cells), 1, len(nums) - 1)
    gap = np.minimum(abs(nums[i] - cells), abs(nums[i - 1] - cells))
    return gap <= rtol * abs(cells)


def leaf_groups(circuit) -> list[dict[int, np.ndarray]]:
    """Per product of leaves (a dense leaf region's unit): {column: the numbers of its leaf}."""
    if isinstance(circuit, DenseCircuit):
        mean, var = circuit.inputs.mean.detach().double().numpy(), circuit.inputs.var.numpy()
        region = circuit.pair_region.numpy()
        return [{int(var[e]): mean[e, k:k + 1] for e in np.flatnonzero(region == r)}
                for r in np.unique(region) for k in range(mean.shape[1])]
    out = []
    for node in circuit.nodes:
        if isinstance(node, Product):
            leaves = [circuit.nodes[c] for c in node.children if isinstance(circuit.nodes[c], Leaf)]
            out.append({leaf.var: np.concatenate([np.ravel(v) for v in leaf.params.values()]) for leaf in leaves})
    return out


def leaks(circuit, X: np.ndarray, columns: np.ndarray) -> tuple[int, int]:
    """(training cells of ``columns`` found verbatim in the payload, rows equal to a leaf group on
    3 or more of ``columns``)."""
    _, tensors = to_payload(circuit)
    rtol = 2.0 ** -23 if isinstance(circuit, DenseCircuit) else 1e-9
    cells = X.astype(np.float32).astype(float) if isinstance(circuit, DenseCircuit) else X
    keep = identifying(X)
    keep[:, np.setdiff1d(np.arange(X.shape[1]), columns)] = False
    numbers = np.concatenate([np.ravel(v).astype(float) for v in tensors.values()])
    verbatim = int(found(cells[keep], numbers, rtol).sum())
    hits = np.zeros(len(X), dtype=int)
    matched = np.zeros(len(X), dtype=bool)
    for group in leaf_groups(circuit):
        hits[:] = 0
        for var, values in group.items():
            if var in columns:
                hits += keep[:, var] & found(cells[:, var], values, rtol)
        matched |= hits >= 3
    return verbatim, int(matched.sum())


@pytest.mark.parametrize("name", list(LEARNERS))
def test_a_floored_circuit_carries_no_training_cell(name, table):
    train, test = table
    columns = np.arange(DISCRETE if "latent" in name else 0, 10)
    schema = MIXED if "latent" in name else None
    if schema is not None:
        train, test = coded(train, train), coded(test, train)
    result = {}
    for m in (1, FLOOR):
        model = LEARNERS[name](m).fit(train, schema) if schema is not None else LEARNERS[name](m).fit(train)
        result[m] = leaks(model.circuit_, train, columns) + (float(np.mean(model.score_samples(test))),)
    print(f"{name}: (verbatim cells, rows matched, test LL) without the floor {result[1]}, with {result[FLOOR]}")
    assert result[1][0] + result[1][1] > 0  # the attack works without the floor
    assert result[FLOOR][:2] == (0, 0)
    assert np.isfinite(result[FLOOR][2])


def test_em_gives_a_leaf_that_rests_on_one_row_its_column_marginal():
    """A mixture component started on an outlier keeps it alone: EM's M-step copies the row (mean =
    the outlier); with the floor it takes the column's mean and std instead (from where later
    M-steps fit it to the many rows it then covers), in batch and stepwise EM."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 1, 199), [37.123456789]])[:, None]
    for batch, floor, iterations in ((None, 1, 5), (None, FLOOR, 1), (None, FLOOR, 5), (50, FLOOR, 5)):
        c = Circuit(Schema((Feature("x", "continuous"),)))
        a = c.leaf(0, "gaussian", {"mean": np.array(0.0), "std": np.array(1.0)})
        b = c.leaf(0, "gaussian", {"mean": np.array(37.0), "std": np.array(0.01)})
        c.sum([a, b], np.array([0.99, 0.01]))
        em(c, x, iterations=iterations, batch_size=batch, min_rows=floor)
        mean, std = float(c.nodes[b].params["mean"]), float(c.nodes[b].params["std"])
        if floor == 1:
            assert mean == pytest.approx(37.123456789, abs=1e-9)
        elif iterations == 1:
            assert (mean, std) == (pytest.approx(x.mean(), rel=1e-9), pytest.approx(x.std(), rel=1e-9))
        else:
            assert abs(mean - 37.123456789) > 30


def test_em_keeping_nodes_below_the_floor_leaves_one_rows_leaf_and_edge_as_they_were():
    """``keep_below`` (a cluster's circuit refitted from a circuit of all rows): the leaf that one
    row alone reaches keeps the parameters it had, neither that row's value nor the marginal of
    the rows EM runs on, and its sum keeps its weights (their split would count that one row),
    while a leaf of many rows is refitted to them. Without it, the sum's weights are refitted."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(3, 1, 199), [37.123456789]])[:, None]
    c = Circuit(Schema((Feature("x", "continuous"),)))
    a = c.leaf(0, "gaussian", {"mean": np.array(0.0), "std": np.array(1.0)})
    b = c.leaf(0, "gaussian", {"mean": np.array(37.0), "std": np.array(0.5)})
    root = c.sum([a, b], np.array([0.9, 0.1]))
    plain = copy.deepcopy(c)
    em(c, x, iterations=3, min_rows=FLOOR, keep_below=True)
    assert (float(c.nodes[b].params["mean"]), float(c.nodes[b].params["std"])) == (37.0, 0.5)
    assert float(c.nodes[a].params["mean"]) == pytest.approx(x[:199].mean(), abs=0.05)
    np.testing.assert_allclose(c.nodes[root].weights, [0.9, 0.1], atol=1e-6)
    em(plain, x, iterations=3, min_rows=FLOOR)
    assert plain.nodes[root].weights[1] < 0.02  # (refitted: 0.011, the one row and the marginal's tail)


def test_em_keeps_the_weights_of_a_sum_that_one_row_uses():
    """The sum under an outlier's component is used by that row alone: EM would set its weights to
    the row's choice; with the floor they stay."""
    rng = np.random.default_rng(0)
    x = np.stack([np.concatenate([rng.normal(0, 1, 199), [40.0]]), np.concatenate([rng.integers(0, 2, 199), [1]])],
                 axis=1).astype(float)
    for floor in (1, FLOOR):
        c = Circuit(Schema((Feature("x", "continuous"), Feature("y", "categorical", ("a", "b")))))
        common = c.product([c.leaf(0, "gaussian", {"mean": np.array(0.0), "std": np.array(1.0)}),
                            c.leaf(1, "categorical", {"probs": np.array([0.5, 0.5])})])
        choice = c.sum([c.leaf(1, "categorical", {"probs": np.array([0.9, 0.1])}),
                        c.leaf(1, "categorical", {"probs": np.array([0.1, 0.9])})], np.array([0.5, 0.5]))
        outlier = c.product([c.leaf(0, "gaussian", {"mean": np.array(40.0), "std": np.array(0.5)}), choice])
        c.sum([common, outlier], np.array([0.99, 0.01]))
        em(c, x, iterations=3, min_rows=floor)
        weights = c.nodes[choice].weights
        assert weights[1] > 0.9 if floor == 1 else np.allclose(weights, 0.5, atol=1e-4)


def test_adam_trained_inputs_are_projected_onto_floored_statistics():
    """Adam moves units onto an outlier row (no statistics to floor); the floor's projection after
    training (one floored M-step) leaves none there."""
    rng = np.random.default_rng(3)
    X = rng.normal(0, 1, (200, 4))
    X[0] = 40 + rng.random(4)
    top = {}
    for m in (1, FLOOR):
        model = DensePC(structure="binary-trees", units=4, depth=1, repetitions=2, epochs=100, method="adam", lr=0.5,
                        max_var=10.0, device="cpu", batch_size=50, min_leaf_rows=m).fit(X)
        top[m] = float(model.circuit_.inputs.mean.detach().max())
    assert top[1] > 39 and top[FLOOR] < 40 / FLOOR + 2


def test_floored_histogram_edges_lie_on_a_grid_and_bins_hold_ten_rows():
    rng = np.random.default_rng(1)
    for x in (np.concatenate([np.zeros(40), rng.lognormal(3, 1, 160), [5123.4567]]),  # an outlier
              np.concatenate([np.zeros(50), rng.uniform(0, 100, 150)])):  # a point mass
        w = np.ones(len(x))
        edges = grid_edges(x, w, FLOOR)
        counts, _ = np.histogram(x, bins=edges)
        assert ((counts == 0) | (counts >= FLOOR)).all() and edges[0] <= x.min() and edges[-1] >= x.max()
        step = 10.0 ** np.floor(np.log10((x.max() - x.min()) / np.ceil(np.sqrt(len(x)))))
        assert np.allclose(edges / step, np.round(edges / step), rtol=0, atol=1e-9)
        assert not np.isin(edges, x).any()
        params = Histogram.fit(x, w, 0, min_rows=FLOOR)
        Histogram.check(params)
        np.testing.assert_array_equal(Histogram.fit(x, w, 0)["edges"], histogram_edges(x, w))  # (no floor: as before)
    assert edges[0] < 0 < edges[1] <= 10 * step  # (the point mass keeps a narrow bin)


def test_tree_tables_of_rare_parent_states_take_the_marginal():
    rng = np.random.default_rng(2)
    parent = np.where(rng.random(300) < 0.02, 2, rng.integers(0, 2, 300)).astype(float)  # state 2: ~6 rows
    child = np.where(parent == 2, 2, rng.integers(0, 3, 300)).astype(float)
    X = np.stack([parent, child], axis=1)
    tree, cpts = chow_liu(X, [3, 3], 0.1, penalty=0.0)
    floored = floor_cpts(X, [3, 3], tree, cpts, 0.1, FLOOR)
    v = int(np.flatnonzero(tree >= 0)[0])
    rare = np.bincount(X[:, 1 - v].astype(int), minlength=3) < FLOOR
    counts = np.bincount(X[:, v].astype(int), minlength=3) + 0.1
    np.testing.assert_allclose(floored[v][rare], np.broadcast_to(counts / counts.sum(), (rare.sum(), 3)))
    np.testing.assert_array_equal(floored[v][~rare], cpts[v][~rare])

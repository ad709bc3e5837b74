"""The batched RDC equals the per-variable definition (ranks with scipy, one projection per
variable) to rounding, and finds dependence where there is some."""

import numpy as np
from scipy.stats import rankdata

from fedpgm.circuits.rdc import RandomFeatures, average_ranks, onehot, onehot_copula, rdc_matrix, restrict_order


def reference_features(data, cards, k=10, s=1 / 6, seed=0):
    """The RDC's random features variable by variable, as Lopez-Paz et al. define them."""
    n, d = data.shape
    rng = np.random.default_rng(seed)
    feats = np.empty((n, d, 2 * k))
    for j in range(d):
        col = data[:, j]
        col = np.where(np.isnan(col), np.nanmean(col) if np.isfinite(col).any() else 0.0, col)
        if cards[j] > 2:
            onehot = (col[:, None] == np.arange(cards[j])[None, :]).astype(float)
            onehot = onehot[:, onehot.std(axis=0) > 0]
            x = np.column_stack([rankdata(c) / n for c in onehot.T])
        else:
            x = (rankdata(col) / n)[:, None]
        x = np.column_stack([x, np.ones(n)])
        proj = x @ (rng.normal(size=(x.shape[1], k)) * (s / x.shape[1]))
        feats[:, j, :k], feats[:, j, k:] = np.sin(proj), np.cos(proj)
    return feats


def test_batched_features_equal_the_definition_and_dependence_is_found():
    rng = np.random.default_rng(3)
    n = 400
    a = rng.normal(size=n)
    data = np.column_stack([a, a ** 2 + 0.1 * rng.normal(size=n), rng.normal(size=n),
                            rng.integers(0, 4, n), (a > 0).astype(float), rng.integers(0, 2, n)])
    data[5, 0] = data[7, 3] = np.nan
    cards = [0, 0, 0, 4, 2, 2]
    ours = RandomFeatures(data, cards, seed=5).block(range(6)).permute(2, 0, 1).numpy()  # (d, 2k, n) -> (n, d, 2k)
    np.testing.assert_allclose(ours, reference_features(data, cards, seed=5), rtol=0, atol=1e-14)
    rdc = rdc_matrix(data, cards, seed=5)
    assert rdc[0, 1] > 0.5 and rdc[0, 4] > 0.5  # a nonlinear and a thresholded dependence
    assert rdc[0, 2] < 0.3 and rdc[2, 5] < 0.3 and np.allclose(rdc, rdc.T) and np.all(np.diag(rdc) == 0)


def test_average_ranks_equal_scipy_with_ties():
    rng = np.random.default_rng(0)
    x = np.vstack([rng.integers(0, 5, 300), rng.normal(size=300), np.zeros(300), np.arange(300)[::-1]]).astype(float)
    np.testing.assert_array_equal(average_ranks(x), rankdata(x, axis=1))


def test_a_child_slice_ranks_from_its_parents_order_as_from_its_own_sort():
    rng = np.random.default_rng(1)
    x = np.vstack([rng.integers(0, 3, 500), rng.normal(size=500), np.round(rng.normal(size=500), 1)]).astype(float)
    keep = rng.random(500) < 0.4
    child = restrict_order(np.argsort(x, axis=1), keep)
    assert child.shape == (3, keep.sum())
    assert np.all(np.diff(np.take_along_axis(x[:, keep], child, axis=1), axis=1) >= 0)  # sorts the child's rows
    np.testing.assert_array_equal(average_ranks(x[:, keep], child), rankdata(x[:, keep], axis=1))


def test_one_hot_columns_are_the_states_a_slice_holds():
    """A slice of 200 rows of a 3,000-state column: one column per state it holds, in state order
    (the rest would be columns of zeros), none set by a value that is no state (a NaN's fill);
    its copula equals the one of all 3,000 one-hot columns with the constant ones left out."""
    rng = np.random.default_rng(0)
    col = rng.choice([3.0, 17.0, 2999.0, 1200.0], size=200)
    col[:5] = 830.4  # (the mean that fills a NaN)
    hot = onehot(col, 3000)
    assert hot.shape == (200, 4) and (hot.sum(axis=1) == np.r_[np.zeros(5), np.ones(195)]).all()
    np.testing.assert_array_equal(hot, col[:, None] == np.array([3.0, 17.0, 1200.0, 2999.0]))
    every = col[:, None] == np.arange(3000)
    ones = every.sum(axis=0)
    every, ones = every[:, (ones > 0) & (ones < 200)], ones[(ones > 0) & (ones < 200)]
    np.testing.assert_array_equal(onehot_copula(col, 3000), np.where(every, 200 - ones + (ones + 1) / 2,
                                                                     (200 - ones + 1) / 2) / 200)
    assert onehot_copula(np.full(10, 4.0), 3000).shape == (10, 1)  # one state: a constant copula

import numpy as np
import pytest

from fedpgm.circuits.leaves import Histogram, histogram_edges


def test_point_masses_get_their_own_bins_and_the_rest_equal_weight_bins():
    x = np.array([1, 2, 2, 3] + [5] * 12, dtype=float)  # 16 rows: 4 bins; 5 holds 3/4 of the weight
    edges = histogram_edges(x, np.ones_like(x))
    # 5's bin: range / bins (1) wide; the other 4 rows in 3
    # equal-weight parts, whose cuts (at weights 1.33 and 2.67 of 4) both fall on the value 2
    np.testing.assert_allclose(edges, [1.0, 2.0, 4.5, 5.5])
    leaf = Histogram.fit(x, np.ones_like(x), 0)
    np.testing.assert_allclose(leaf["probs"][-1], (12 + 0.1) / (16 + 0.3))  # 3 bins, 0.1 pseudo-count each


def test_heavy_tailed_column_keeps_its_point_mass_apart():
    """92% zeros and a long tail (Adult's capital-gain): the zeros get a bin centred on 0 and
    range / bins wide, the tail keeps equal-weight bins of its own (quantile bins would merge
    at the point mass and leave a handful)."""
    rng = np.random.default_rng(0)
    x = np.where(rng.random(5000) < 0.92, 0.0, np.round(rng.lognormal(8, 1.2, 5000)))
    x[:3] = 99999.0
    edges = histogram_edges(x, np.ones_like(x))
    assert len(edges) - 1 <= 64 and np.all(np.diff(edges) > 0)
    zero_bin = np.searchsorted(edges, 0.0, side="right") - 1
    half = x.max() / 128  # range / 64 bins, halved
    np.testing.assert_allclose(edges[zero_bin: zero_bin + 2], [-half, half])
    assert len(edges) - 1 >= 40  # the tail's 8% of rows keep about 63 - (cuts inside 0's bin) bins
    leaf = Histogram.fit(x, np.ones_like(x), 0)
    density = leaf["probs"] / np.diff(leaf["edges"])
    assert density[zero_bin] > 100 * density[np.searchsorted(edges, 3000) - 1]


def test_weights_move_the_quantile_edges():
    x = np.linspace(0, 1, 1000)
    w = np.where(x < 0.5, 9.0, 1.0)  # 90% of the weight below 0.5
    edges = histogram_edges(x, w, max_bins=10)
    assert (edges < 0.5).sum() >= 8


def test_a_single_value_gets_a_bin_as_wide_as_the_std_floor():
    edges = histogram_edges(np.full(20, 0.37), np.ones(20), min_std=0.01)
    np.testing.assert_allclose(edges, [0.36, 0.38])
    leaf = Histogram.fit(np.full(20, 0.37), np.ones(20), 0, min_std=0.01)
    np.testing.assert_allclose(leaf["probs"], [1.0])


def test_a_continuous_leaf_has_no_state_probabilities():
    """Only discrete leaf types map to and from the probability of each state."""
    import pytest

    from fedpgm.circuits.leaves import leaf_type
    from fedpgm.errors import FedpgmError

    for name in ("gaussian", "histogram"):
        with pytest.raises(FedpgmError, match=f"a {name} leaf is a density over a continuous variable"):
            leaf_type(name).from_probabilities(np.array([0.5, 0.5]))
    probs = np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(leaf_type("categorical").probabilities(leaf_type("categorical").from_probabilities(probs)),
                               probs)


def test_each_linear_type_states_its_linear_form_and_the_others_have_none():
    from fedpgm.circuits.leaves import LEAF_TYPES, LINEAR_LEAVES

    gaussian = {"mean": np.array(1.5), "std": np.array(0.4)}
    terms, log_mode = LEAF_TYPES["gaussian"].linear_form(gaussian, center=2.0, scale=3.0)
    x = np.array([-1.0, 1.5, 4.0])
    z = (x - 2.0) / 3.0
    want = -0.5 * ((x - 1.5) / 0.4) ** 2 - np.log(0.4) - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(terms["sq"] * z * z + terms["lin"] * z + terms["obs"], want, rtol=1e-12)
    assert log_mode == pytest.approx(want[1]) and LEAF_TYPES["gaussian"].location(gaussian) == (1.5, 0.4)
    terms, log_mode = LEAF_TYPES["categorical"].linear_form({"probs": np.array([0.2, 0.0, 0.8])})
    assert terms[0] == pytest.approx(np.log(0.2)) and terms[1] == -1e30 and log_mode == pytest.approx(np.log(0.8))
    assert LEAF_TYPES["bernoulli"].linear_form({"p": np.array(0.3)})[0] == pytest.approx({0: np.log(0.7), 1: np.log(0.3)})
    assert sorted(LINEAR_LEAVES) == ["bernoulli", "categorical", "gaussian"]
    assert LEAF_TYPES["histogram"].location({}) is None and LEAF_TYPES["categorical"].location({}) is None


@pytest.mark.parametrize("kind", ["categorical", "bernoulli", "gaussian"])
def test_group_statistics_equal_each_leafs_own_statistics(kind):
    """The vectorised E-step statistics of L leaves at once equal ``stats`` of each leaf on its
    observed rows (the base class's loop), with missing values, values outside a leaf's states
    and leaves of different cardinality; a categorical leaf of 3,000 states (a date column) takes
    one pass over its rows, not one per state."""
    from fedpgm.circuits.leaves import LeafType, leaf_type

    rng = np.random.default_rng(0)
    n, cards = 400, [2, 7, 3000, 1]
    kind_type = leaf_type(kind)
    if kind == "categorical":
        x = np.stack([rng.integers(0, c, n) for c in cards], axis=1).astype(float)
        x[0, 1] = 9.0  # no state of that leaf
        params = [{"probs": np.full(c, 1 / c)} for c in cards]
    elif kind == "bernoulli":
        x = rng.integers(0, 2, (n, 4)).astype(float)
        params = [{"p": np.array(0.5)}] * 4
    else:
        x = rng.normal(size=(n, 4))
        params = [{"mean": np.array(0.0), "std": np.array(1.0)}] * 4
    x[rng.random(x.shape) < 0.1] = np.nan
    w = rng.random((x.shape[1], n))
    ours = kind_type.group_stats(x, w, params)
    each = LeafType.group_stats.__func__(kind_type, x, w, params)
    assert ours.shape == each.shape and ours.dtype == np.float64
    np.testing.assert_allclose(ours, each, rtol=1e-12, atol=1e-9)
    none = kind_type.group_stats(x[:0], w[:, :0], params)  # (a chunk without rows)
    assert none.shape == each.shape and none.dtype == np.float64 and not none.any()

"""Dense circuits: layers against brute-force enumeration, EM, files, sampling, the estimator."""

import itertools
import json

import numpy as np
import pytest
import torch

from fedpgm.circuits import dense, dense_train
from fedpgm.circuits.dense import DenseCircuit
from fedpgm.circuits.dense_estimator import DensePC
from fedpgm.circuits.io import load_circuit
from fedpgm.circuits.region_graph import RegionGraph, binary_trees, build, poon_domingos, quad_tree
from fedpgm.data import load_dataset
from fedpgm.errors import FedpgmError


def brute_force(model: DenseCircuit, x: np.ndarray) -> float:
    """p(x) by recursion over the region graph with plain numpy, sharing no code with the
    layered evaluation: leaf units are products of Bernoulli/categorical masses, partitions
    sum W[o, i, j] left[i] right[j], regions mix their partitions, the root mixes its units."""
    w = {k: v.detach().double().numpy() for k, v in model.weights().items()}
    k = model.units
    r_pos = {r: i for i, r in enumerate(model.region_order)}
    p_pos = {j: i for i, j in enumerate(model.part_order)}
    var = model.inputs.var.numpy()
    pair_region = model.pair_region.numpy()
    if model.inputs.kind == "bernoulli":
        p1 = torch.sigmoid(model.inputs.logit).detach().double().numpy()
        leaf_p = lambda e, v: p1[e] if v == 1 else 1 - p1[e]  # noqa: E731
    else:
        probs = torch.softmax(model.inputs.logits, -1).detach().double().numpy()
        leaf_p = lambda e, v: probs[e, :, int(v)]  # noqa: E731

    def value(r: int) -> np.ndarray:
        pos = r_pos[r]
        parts = sorted(p_pos[j] for j, (p, _, _) in enumerate(model.graph.partitions) if p == r)
        if not parts:
            out = np.ones(k)
            for e in np.flatnonzero(pair_region == pos):
                if not np.isnan(x[var[e]]):
                    out = out * leaf_p(e, x[var[e]])
            return out
        values = []
        for q in parts:
            _, a, b = model.graph.partitions[model.part_order[q]]
            weights = w["part"][q].reshape(k, k, k)
            values.append(np.einsum("oij,i,j->o", weights, value(a), value(b)))
        if len(values) == 1:
            return values[0]
        return np.einsum("om,mo->o", w["mix"][pos, :, :len(values)], np.array(values))

    return float(w["root"] @ value(model.graph.root))


@pytest.mark.parametrize("graph, kind, levels", [
    (poon_domingos((2, 3), 8), "bernoulli", None),
    (quad_tree((2, 2)), "categorical", 3),
    (binary_trees(5, 2, 3, seed=1), "bernoulli", None),
])
def test_layers_equal_brute_force_and_sum_to_one(graph, kind, levels):
    model = DenseCircuit(graph, 3, kind, levels, seed=2)
    n = graph.n_vars
    domain = np.array(list(itertools.product(range(levels or 2), repeat=n)), dtype=float)
    ll = model.log_likelihood(domain)
    expected = np.log([brute_force(model, x) for x in domain])
    np.testing.assert_allclose(ll, expected, rtol=1e-5, atol=1e-5)
    assert abs(np.exp(ll).sum() - 1) < 1e-5
    # a marginal: the first two variables missing equals the sum over their values
    evidence = domain[domain[:, 0] + domain[:, 1] == 0].copy()
    evidence[:, :2] = np.nan
    marg = model.log_likelihood(evidence)
    by_sum = [np.log(sum(np.exp(ll[(domain[:, 2:] == e[2:]).all(1)]))) for e in evidence]
    np.testing.assert_allclose(marg, by_sum, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.exp(marg).sum(), 1.0, atol=1e-5)


@pytest.mark.parametrize("cells", [7, 50])  # blocks of one partition and a few rows; of several partitions
def test_blocked_evaluation_equals_one_call_per_layer(monkeypatch, cells):
    model = DenseCircuit(poon_domingos((4, 4), 2), 4, "gaussian", seed=3)
    x = torch.rand(9, 16, dtype=torch.float32)
    x[2, :5] = float("nan")
    with torch.no_grad():
        whole = model(x)
        monkeypatch.setattr(dense, "BLOCK_CELLS", cells)
        blocked = model(x)
    assert torch.isfinite(whole).all()
    torch.testing.assert_close(blocked, whole, rtol=1e-6, atol=1e-5)  # float32 matmuls of other shapes


def test_layered_pass_gradients_equal_finite_differences():
    model = DenseCircuit(poon_domingos((3, 3), 2), 3, "gaussian", seed=4)
    assert any(lay.mix.shape[1] > 1 for lay in model.layers)  # mixing layers are covered too
    w = {k: v.detach().double() for k, v in model.weights().items()}
    x = torch.rand(5, 9, dtype=torch.float64)
    leaves = model.leaf_regions(x, leaf=model.inputs.log_prob(x.float()).double()).detach()
    inputs = tuple(t.clone().requires_grad_() for t in (leaves, w["part"], w["mix"]))
    torch.autograd.gradcheck(lambda *a: dense.LayeredPass.apply(model, *a), inputs, eps=1e-6, atol=1e-6)


def test_region_graphs():
    g = poon_domingos((28, 28), 8)
    assert (len(g.regions), len(g.partitions)) == (1296, 6048)  # (8*9/2)^2 rectangles; 2 * 84 * 36 splits
    assert sorted(v for r in g.leaves() for v in g.regions[r]) == list(range(784))  # cells tile the image
    assert len(poon_domingos((28, 14), 8, cell=3.5).partitions) == 1200  # a half keeps the whole's cells
    q = quad_tree((4, 6))
    assert sorted(len(q.regions[r]) for r in q.leaves()) == [1] * 24
    b = binary_trees(10, depth=2, repetitions=3, seed=0)
    assert sum(p == b.root for p, _, _ in b.partitions) == 3 and len(b.leaves()) == 12
    with pytest.raises(FedpgmError, match="unknown region graph 'spiral'"):
        build("spiral", 4, (2, 2))
    with pytest.raises(FedpgmError, match="needs an image"):
        build("pd", 4)
    with pytest.raises(FedpgmError, match="K must be >= 1"):
        DenseCircuit(g, 0)
    bad = [  # halves that overlap, that miss a variable, a partition of an unknown region
        RegionGraph([(0, 1, 2), (0, 1), (1, 2)], [(0, 1, 2)], 0),
        RegionGraph([(0, 1, 2), (0,), (1,)], [(0, 1, 2)], 0),
        RegionGraph([(0, 1), (0,), (1,)], [(0, 1, 5)], 0)]
    for graph, message in zip(bad, ["does not split", "does not split", "unknown region"]):
        with pytest.raises(FedpgmError, match=message):
            DenseCircuit(graph, 2, "bernoulli")


def test_full_batch_em_never_lowers_the_training_log_likelihood():
    rng = np.random.default_rng(0)
    x = (rng.random((300, 6)) < np.linspace(0.1, 0.9, 6)).astype(float)
    x[:, 3] = x[:, 0]  # a dependence for the mixture to find
    model = DenseCircuit(poon_domingos((2, 3), 8), 4, "bernoulli", seed=0)
    history = dense_train.train(model, x, "batch", epochs=6)
    assert all(b >= a - 1e-6 for a, b in zip(history, history[1:])), history
    assert history[-1] > history[0] + 0.1
    digits = load_dataset("digits").drop_label()
    g = DensePC(pieces=2, units=3, method="batch", epochs=5).fit(digits.train.iloc[:400], digits.schema)
    assert all(b >= a - 1e-3 for a, b in zip(g.history_, g.history_[1:])), g.history_


def test_save_load_gives_identical_outputs_and_refuses_bad_files(tmp_path):
    digits = load_dataset("digits").drop_label()
    model = DensePC(pieces=4, epochs=1, leaf="categorical").fit(digits.train.iloc[:200], digits.schema)
    model.save(tmp_path / "m")
    again = DensePC.load(tmp_path / "m")
    test = digits.test.iloc[:50]
    np.testing.assert_array_equal(again.log_likelihood(test), model.log_likelihood(test))
    assert again.get_params() == model.get_params()
    doc = json.loads((tmp_path / "m" / "structure.json").read_text())
    doc["spec"]["units"] = 4  # the arrays no longer fit
    (tmp_path / "m" / "structure.json").write_text(json.dumps(doc))
    with pytest.raises(FedpgmError, match="do not fit the described circuit"):
        load_circuit(tmp_path / "m")


def test_sampling_matches_the_distribution_and_respects_evidence():
    model = DenseCircuit(binary_trees(3, 1, 2, seed=0), 3, "bernoulli", seed=4)
    domain = np.array(list(itertools.product([0, 1], repeat=3)), dtype=float)
    p = np.exp(model.log_likelihood(domain))
    draws = model.select(torch.full((20000, 3), float("nan")), "sample", seed=1).numpy()
    freq = np.array([(draws == d).all(1).mean() for d in domain])
    assert np.abs(freq - p).max() < 0.015
    evidence = torch.tensor([[1.0, float("nan"), float("nan")]]).repeat(20000, 1)
    draws = model.select(evidence, "sample", seed=2).numpy()
    assert (draws[:, 0] == 1).all()
    cond = p[domain[:, 0] == 1] / p[domain[:, 0] == 1].sum()
    freq = np.array([(draws == d).all(1).mean() for d in domain[domain[:, 0] == 1]])
    assert np.abs(freq - cond).max() < 0.015


def test_dense_estimator_on_digits(tmp_path):
    digits = load_dataset("digits").drop_label()
    model = DensePC(pieces=4, epochs=3, leaf="categorical").fit(digits.train, digits.schema)
    bpd = model.bits_per_dim(digits.test)
    assert 1.5 < bpd < np.log2(17) - 1  # far better than uniform over the 17 levels
    x = digits.test.to_numpy()[:5].copy()
    x[:, 32:] = np.nan
    filled = model.complete(x, "max")
    np.testing.assert_array_equal(filled[:, :32], x[:, :32])
    assert np.isin(filled, np.arange(17)).all()
    assert model.sample(3).shape == (3, 64)
    with pytest.raises(FedpgmError, match="no label to classify"):
        model.predict_proba(digits.test)


def test_categorical_inputs_start_from_the_columns_value_frequencies(monkeypatch):
    digits = load_dataset("digits").drop_label()
    estimator = DensePC(pieces=4, leaf="categorical")
    model = estimator.build(digits.schema)
    data = digits.train.to_numpy()[:, model.columns].astype(float)
    data[:7, 3] = np.nan  # missing values are left out of the counts
    estimator.initialise(model, data)
    probs = torch.softmax(model.inputs.logits, -1).detach().numpy()  # (E, K, 17)
    var = model.inputs.var.numpy()
    for e in (0, len(var) // 2, len(var) - 1, int(np.flatnonzero(var == 3)[0])):  # (the last: column 3's)
        col = data[:, var[e]]
        freq = np.bincount(col[~np.isnan(col)].astype(int), minlength=17) / (~np.isnan(col)).sum()
        np.testing.assert_allclose(probs[e], np.broadcast_to(0.2 * freq + 0.8 / 17, probs[e].shape), atol=1e-6)
    # the start is worth it: one epoch of Adam from it against one from softmax(normal) logits
    started = DensePC(pieces=4, epochs=1, leaf="categorical", method="adam").fit(digits.train, digits.schema)
    monkeypatch.setattr(DensePC, "initialise", lambda self, model, data: None)
    random = DensePC(pieces=4, epochs=1, leaf="categorical", method="adam").fit(digits.train, digits.schema)
    assert started.bits_per_dim(digits.test) < random.bits_per_dim(digits.test) - 0.05


def test_estimator_errors():
    digits = load_dataset("digits")
    with pytest.raises(FedpgmError, match="leave the label 'target' out"):
        DensePC(epochs=1).fit(digits.train, digits.schema)
    with pytest.raises(FedpgmError, match="units"):
        DensePC(units=0).check_params()
    if not torch.cuda.is_available():
        with pytest.raises(FedpgmError, match="torch sees no GPU"):
            DensePC(device="cuda").check_params()
    wine = load_dataset("wine").drop_label()  # no image: pd cannot apply, binary trees can
    with pytest.raises(FedpgmError, match="needs an image"):
        DensePC(epochs=1).fit(wine.train, wine.schema)
    ok = DensePC(structure="binary-trees", epochs=2, min_var=1e-2, max_var=1e4).fit(wine.train, wine.schema)
    assert np.isfinite(ok.score(wine.test))

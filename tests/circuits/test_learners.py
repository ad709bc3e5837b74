import numpy as np
import pytest

from fedpgm.circuits.em import em
from fedpgm.circuits.estimator import LearnSPN, RatSPN
from fedpgm.circuits import learnspn
from fedpgm.circuits.learnspn import learn_spn
from fedpgm.circuits.weighted import std_floors
from fedpgm.circuits.ratspn import rat_spn
from fedpgm.data import load_dataset
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError


@pytest.fixture(scope="module")
def mixed():
    return load_dataset("synthetic:mixed", rows=3000, seed=0)


def test_learnspn_close_to_the_true_density_on_mixed_data(mixed):
    truth = mixed.truth.log_density(mixed.test).mean()
    for leaf in ("gaussian", "histogram"):
        model = LearnSPN(min_instances_slice=100, threshold=0.3, leaf=leaf).fit(mixed.train, mixed.schema)
        model.circuit_.validate()
        score = model.score(mixed.test)
        # the latent-class truth is within reach: a learned circuit gets within 0.6 nats per row
        assert truth - 0.6 < score <= truth + 0.05, (leaf, score, truth)
        naive = LearnSPN(min_instances_slice=10**9).fit(mixed.train, mixed.schema).score(mixed.test)
        assert score > naive + 0.5  # structure learning beats independent leaves


def test_learnspn_handles_constant_columns_and_nan():
    rng = np.random.default_rng(0)
    n = 600
    a = rng.integers(0, 2, n)
    X = np.column_stack([a, a ^ (rng.random(n) < 0.1), np.zeros(n), rng.integers(0, 2, n)]).astype(float)
    X[rng.random(X.shape) < 0.05] = np.nan
    X[:, 2] = np.where(np.isnan(X[:, 2]), np.nan, 0.0)  # constant where observed
    schema = Schema(tuple(Feature(f"b{i}", "binary", ("0", "1")) for i in range(4)))
    c = learn_spn(schema, X, min_instances_slice=50, threshold=0.3)
    model = LearnSPN(50, 0.3).fit(X, schema)
    assert np.isfinite(model.log_likelihood(X)).all()
    assert c.stats()["n_sums"] >= 1  # b0 and b1 are dependent: they are not split apart at once


def test_child_slices_sorted_by_their_parents_orders_learn_the_same_circuit(mixed, monkeypatch):
    """Complete data: each slice's sort orders come from its parent's (``restrict_order``); with
    every slice sorting afresh the circuit and its likelihoods are the same."""
    assert not np.isnan(mixed.train.to_numpy(float)).any()
    handed_down = LearnSPN(min_instances_slice=100, threshold=0.3).fit(mixed.train, mixed.schema)
    calls = []
    monkeypatch.setattr(learnspn, "restrict_order", lambda order, keep: calls.append(keep.sum()))
    fresh = LearnSPN(min_instances_slice=100, threshold=0.3).fit(mixed.train, mixed.schema)
    assert len(calls) >= 2 and handed_down.circuit_.stats() == fresh.circuit_.stats()
    np.testing.assert_array_equal(handed_down.log_likelihood(mixed.test), fresh.log_likelihood(mixed.test))


def test_learnspn_bad_parameters():
    schema = Schema((Feature("x", "continuous"),))
    with pytest.raises(FedpgmError, match="min_instances_slice must be >= 1"):
        learn_spn(schema, np.zeros((5, 1)), min_instances_slice=0)
    with pytest.raises(FedpgmError, match="threshold must lie in"):
        learn_spn(schema, np.zeros((5, 1)), threshold=2.0)
    with pytest.raises(FedpgmError, match="no observed values"):
        learn_spn(schema, np.full((5, 1), np.nan))
    with pytest.raises(FedpgmError, match="not fitted yet"):
        LearnSPN().score(np.zeros((2, 1)))
    with pytest.raises(FedpgmError, match="alpha .* must be > 0"):
        learn_spn(schema, np.zeros((5, 1)), alpha=0.0)
    with pytest.raises(FedpgmError, match="row_clusters .* must be >= 2"):
        learn_spn(schema, np.zeros((5, 1)), row_clusters=1)


def test_the_pseudo_count_smooths_every_leaf_and_tree_by_its_formula():
    X = np.array([[0, 0, 2], [0, 1, 2], [1, 1, 2], [0, 1, 0]], dtype=float)  # 4 rows: one slice, no split
    schema = Schema((Feature("a", "binary", ("0", "1")), Feature("b", "binary", ("0", "1")),
                     Feature("c", "categorical", ("0", "1", "2"))))
    unseen = []  # the trees' probability of a row the data never shows
    for alpha in (0.01, 1.0, 5.0):
        c = learn_spn(schema, X, min_instances_slice=10, alpha=alpha)
        leaves = {n.var: n.params for n in c.nodes if hasattr(n, "var")}
        assert float(leaves[0]["p"]) == pytest.approx((1 + alpha) / (4 + 2 * alpha))
        np.testing.assert_allclose(leaves[2]["probs"], (np.array([1, 0, 3]) + alpha) / (4 + 3 * alpha))
        tree = LearnSPN(min_instances_slice=10, alpha=alpha, leaf_model="chow-liu").fit(X, schema)
        unseen.append(float(np.exp(tree.log_likelihood(np.array([[1, 0, 1]], dtype=float)))[0]))
    assert 0 < unseen[0] < 1e-3 and unseen[0] < unseen[1] < unseen[2]  # more smoothing, more mass on it


def test_row_clusters_splits_rows_into_that_many_parts_and_em_refines_after_learning(mixed):
    X = mixed.train[mixed.schema.names].to_numpy()[:1000]
    c = learn_spn(mixed.schema, X, min_instances_slice=300, threshold=0.1, row_clusters=3)
    arity = [len(n.weights) for n in c.nodes if hasattr(n, "weights")]
    assert max(arity) == 3 and c.stats()["n_sums"] >= 1
    plain = LearnSPN(min_instances_slice=300, threshold=0.1).fit(X, mixed.schema)
    refined = LearnSPN(min_instances_slice=300, threshold=0.1, em_iterations=3).fit(X, mixed.schema)
    by_hand = LearnSPN(min_instances_slice=300, threshold=0.1).fit(X, mixed.schema)
    em(by_hand.circuit_, X, 3, floors=std_floors(X))
    by_hand.compiled_ = by_hand._compile(by_hand.circuit_)
    assert refined.score(X) == pytest.approx(by_hand.score(X), abs=1e-12)
    assert refined.score(X) > plain.score(X) + 0.01  # EM raises the training likelihood of the counted model


def test_batch_em_increases_likelihood_monotonically(mixed):
    X = mixed.train[mixed.schema.names].to_numpy()
    c = rat_spn(mixed.schema, X, depth=2, repetitions=3, n_sums=3, n_inputs=3, seed=1)
    history = em(c, X, iterations=8)
    assert all(b >= a - 1e-6 for a, b in zip(history, history[1:]))  # (totals from a float32 E-step)
    assert history[-1] > history[0] + 0.1


def test_the_float32_e_step_gives_the_float64_statistics(mixed):
    import torch

    from fedpgm.circuits.compiled import CompiledCircuit
    from fedpgm.circuits.em import expected_statistics

    X = mixed.train[mixed.schema.names].to_numpy(dtype=float, copy=True)
    X[::7, 1] = np.nan  # missing values carry no weight in either
    c = LearnSPN(min_instances_slice=200, threshold=0.1, row_clusters=3).fit(X, mixed.schema).circuit_
    single, ll32 = expected_statistics(c, CompiledCircuit(c, dtype=torch.float32), X)
    double, ll64 = expected_statistics(c, CompiledCircuit(c, dtype=torch.float64), X)
    assert single.keys() == double.keys() and len(double) > 20
    for key in double:
        assert single[key].dtype == np.float64
        np.testing.assert_allclose(single[key], double[key], rtol=1e-5, atol=1e-6 * len(X))
    assert ll32 == pytest.approx(ll64, rel=1e-6)


def test_an_m_step_leaves_the_compiled_circuit_equal_to_a_fresh_compilation(mixed):
    import torch

    from fedpgm.circuits.compiled import CompiledCircuit
    from fedpgm.circuits.em import expected_statistics, m_step

    X = mixed.train[mixed.schema.names].to_numpy(dtype=float)
    c = LearnSPN(min_instances_slice=200, threshold=0.1, row_clusters=3).fit(X, mixed.schema).circuit_
    cc = CompiledCircuit(c)
    before = cc.log_likelihood(cc.tensor(X))
    stats, _ = expected_statistics(c, cc, X[:100])  # (a few rows: parameters far from the fit's)
    m_step(c, cc, stats, std_floors(X))
    fresh = CompiledCircuit(c)
    after = cc.log_likelihood(cc.tensor(X))
    assert float((after - before).abs().max()) > 0.1  # (the parameters did change)
    torch.testing.assert_close(after, fresh.log_likelihood(fresh.tensor(X)), rtol=0, atol=1e-12)
    torch.testing.assert_close(cc.forward(cc.tensor(X)), fresh.forward(fresh.tensor(X)), rtol=0, atol=1e-12)


def test_ratspn_is_the_dense_engines_binary_tree_region_graph(mixed):
    from fedpgm.circuits.region_graph import binary_trees
    from fedpgm.circuits.structure import Product
    X = mixed.train[mixed.schema.names].to_numpy()
    c = rat_spn(mixed.schema, X, depth=2, repetitions=3, n_sums=2, n_inputs=3, seed=5)
    graph = binary_trees(len(mixed.schema), depth=2, repetitions=3, seed=5)
    scopes = c.scopes()
    inputs = {frozenset(graph.regions[r]) for r in graph.leaves()}  # a leaf region's products of leaves
    splits = [(scopes[n.children[0]], scopes[n.children[1]]) for i, n in enumerate(c.nodes)
              if isinstance(n, Product) and scopes[i] not in inputs]
    expected = [(frozenset(graph.regions[a]), frozenset(graph.regions[b])) for _, a, b in graph.partitions]
    assert len(expected) == 3 * 3 and set(splits) == set(expected)  # per repetition: the root's split, 2 below
    for s in set(expected):  # all pairs of the halves' 3 inputs (leaf regions) or 2 sums (inner ones)
        assert splits.count(s) == expected.count(s) * (9 if s[0] in inputs else 4)


def test_ratspn_minibatch_em_learns(mixed):
    model = RatSPN(depth=2, repetitions=3, n_sums=3, n_inputs=3, em_iterations=3, batch_size=500).fit(
        mixed.train, mixed.schema)
    untrained = rat_spn(mixed.schema, mixed.train[mixed.schema.names].to_numpy(), 2, 3, 3, 3, seed=0)
    from fedpgm.circuits import CompiledCircuit
    from fedpgm.circuits.queries import log_likelihood
    before = log_likelihood(CompiledCircuit(untrained), mixed.test[mixed.schema.names].to_numpy()).mean()
    assert model.score(mixed.test) > before + 0.2
    proba = model.predict_proba(mixed.test)
    assert proba.shape == (len(mixed.test), 2) and np.allclose(proba.sum(axis=1), 1)
    names = np.asarray(mixed.schema[mixed.schema.label].categories, dtype=object)
    assert (model.predict(mixed.test) == names[mixed.labels("test")]).mean() > 0.6  # labels, not codes


def test_ratspn_restarts_keep_the_best_initialisation(mixed):
    small = dict(depth=2, repetitions=2, n_sums=2, n_inputs=2, em_iterations=4)
    singles = [RatSPN(seed=s, **small).fit(mixed.train, mixed.schema) for s in (1, 2, 3)]
    fits = [m.train_loglik_ for m in singles]
    print("training log-likelihood per initialisation", np.round(fits, 4))
    assert max(fits) - min(fits) > 1e-3  # the initialisations do end apart
    best = RatSPN(seed=1, restarts=3, **small).fit(mixed.train, mixed.schema)
    assert best.train_loglik_ == pytest.approx(max(fits), abs=1e-9)
    winner = singles[int(np.argmax(fits))]
    assert winner is not singles[0]  # here a later initialisation wins
    np.testing.assert_allclose(best.log_likelihood(mixed.test), winner.log_likelihood(mixed.test), atol=1e-9)
    assert best.train_loglik_ == pytest.approx(best.score(mixed.train), abs=1e-9)
    with pytest.raises(FedpgmError, match="The 'restarts' parameter of RatSPN must be an int in the range \\[1, inf\\). Got 0"):
        RatSPN(restarts=0).fit(mixed.train, mixed.schema)


def test_estimator_api(mixed):
    model = LearnSPN(min_instances_slice=200, seed=3)
    assert model.get_params() == {"min_instances_slice": 200, "threshold": 0.3, "leaf": "gaussian", "seed": 3,
                                  "precision": "float64", "min_std_fraction": 0.01, "by_label": False, "min_leaf_rows": 1,
                                  "leaf_model": "univariate", "alpha": 0.1, "row_clusters": 2, "em_iterations": 0,
                                  "latent_states": 12, "em_batch_size": None}
    model.set_params(threshold=0.2)
    with pytest.raises(FedpgmError, match=r"unknown parameter\(s\) \['depth'\]"):
        model.set_params(depth=3)
    model.fit(mixed.train, mixed.schema)
    draws = model.sample(2000, seed=1)
    assert draws.shape == (2000, len(mixed.schema)) and not np.isnan(draws).any()
    # samples follow the model: their mean log-likelihood matches the model's entropy estimate
    assert abs(model.log_likelihood(draws).mean() - model.score(mixed.test)) < 0.5
    ev = mixed.test.copy()
    ev["c0"] = np.nan
    filled = model.mpe(ev)  # a frame in, a frame out, columns named
    assert list(filled.columns) == mixed.schema.names and not filled.isna().any().any()
    assert (filled.to_numpy()[:, 1:] == ev.to_numpy()[:, 1:]).all()  # evidence kept
    # a DataFrame without some columns marginalises them
    sub = mixed.test[["c0", "b0"]]
    assert np.allclose(model.log_likelihood(sub), model.log_likelihood(mixed.test.assign(
        **{c: np.nan for c in mixed.schema.names if c not in ("c0", "b0")})))
    infinite = mixed.test.to_numpy(float, copy=True)
    infinite[3, 0] = np.inf
    for query in (model.log_likelihood, model.mpe, model.score_samples):
        with pytest.raises(FedpgmError, match="evidence for 'c0' is infinite; use NaN for unobserved"):
            query(infinite)


def test_leaf_std_floor_is_relative_to_the_reference_column():
    """A slice where a continuous column is constant (capital-gain = 0 for most people) keeps a
    leaf std of min_std_fraction x the column's std in the reference rows, so one unusual value
    costs a bounded amount instead of ~(value / 1e-3)^2 nats."""
    rng = np.random.default_rng(0)
    gain = np.where(rng.random(2000) < 0.9, 0.0, rng.normal(5000, 1000, 2000))
    X = np.column_stack([gain, rng.normal(0, 1, 2000)])
    zeros = X[gain == 0]
    schema = Schema((Feature("gain", "continuous"), Feature("z", "continuous")))
    floor = 0.05 * X[:, 0].std()
    for model in (LearnSPN(min_std_fraction=0.05), RatSPN(em_iterations=3, min_std_fraction=0.05)):
        model.fit(zeros, schema, reference=X)
        stds = [float(n.params["std"]) for n in model.circuit_.nodes if getattr(n, "var", None) == 0]
        assert stds and min(stds) == pytest.approx(floor)
        assert model.score(np.array([[100.0, 0.0]])) > -30  # was about -5e9 with a 1e-3 floor
    unfloored = LearnSPN(min_std_fraction=0.0).fit(zeros, schema, reference=X)
    assert unfloored.score(np.array([[100.0, 0.0]])) < -1e6
    with pytest.raises(FedpgmError, match="The 'min_std_fraction' parameter of LearnSPN must be a float in the range \\[0.0, inf\\). Got -1"):
        LearnSPN(min_std_fraction=-1).fit(X, schema)


def test_by_label_makes_the_root_a_mixture_over_the_classes():
    ds = load_dataset("breast_cancer", seed=0)
    model = LearnSPN(min_instances_slice=20, by_label=True).fit(ds.train, ds.schema)
    c = model.circuit_
    c.validate()
    root = c.nodes[c.root]
    y = ds.schema.index(ds.schema.label)
    assert len(root.children) == 2
    np.testing.assert_allclose(root.weights, np.bincount(ds.train[ds.schema.label].astype(int)) / len(ds.train))
    for k, child in enumerate(root.children):  # each class's product starts with its label leaf
        head = c.nodes[c.nodes[child].children[0]]
        assert head.var == y and head.params["p"] == pytest.approx(k, abs=0.01)
    truth = np.asarray(ds.schema[ds.schema.label].categories, dtype=object)[ds.labels("test")]
    assert (model.predict(ds.test) == truth).mean() > 0.92


@pytest.mark.timing
def test_a_whole_batch_em_pass_stops_at_its_deadline_between_chunks_and_changes_nothing(mixed, monkeypatch):
    """Each of the E-step's 8 chunks takes 0.3 s more: a pass that would end 2.4 s in stops before
    a chunk that would cross a 1 s deadline, leaves the circuit as it was and is not in the history."""
    import copy
    import time

    from fedpgm.circuits import em as em_module
    from fedpgm.circuits.compiled import CompiledCircuit

    X = mixed.train[mixed.schema.names].to_numpy()
    c = rat_spn(mixed.schema, X, depth=2, repetitions=2, n_sums=2, n_inputs=2, seed=2)
    before = copy.deepcopy(c)
    honest, chunks = CompiledCircuit.flows, []

    def slow(self, values, *args):
        chunks.append(values.shape[1])
        time.sleep(0.3)
        return honest(self, values, *args)

    monkeypatch.setattr(CompiledCircuit, "flows", slow)
    t0 = time.perf_counter()
    history = em_module.em(c, X, iterations=3, deadline=t0 + 1.0)
    took = time.perf_counter() - t0
    assert history == [] and 1 <= len(chunks) <= 3 and sum(chunks) < len(X)
    assert took < 1.0 + 0.3, took  # (at most one chunk's time past the deadline)
    test = mixed.test[mixed.schema.names].to_numpy()
    np.testing.assert_array_equal(c.log_likelihood(test), before.log_likelihood(test))
    chunks.clear()
    assert len(em_module.em(c, X, iterations=1)) == 1 and sum(chunks) == len(X)  # no deadline: to its end

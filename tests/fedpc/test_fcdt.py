import dataclasses
import json

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation, PrivacyAudit
from fedpgm.fedpc.trees import LEAF_SIZES, PRIOR_MIX, Tree, TreeBagging, choose_min_samples_leaf, fit_fcdt

HANDLERS = "fedpgm.fedpc.client:HANDLERS"


@pytest.fixture(scope="module")
def cancer():
    return load_dataset("breast_cancer", seed=0)


def run(part, **kw) -> TreeBagging:
    audit = PrivacyAudit(part)
    with InProcessFederation(part, HANDLERS, mode="sequential", audit=audit) as fed:
        model = fit_fcdt(fed, **kw)
    assert audit.checked > 0  # every reply (the trees) was searched for raw rows
    return model


def test_the_tree_walk_equals_scikit_learn_including_missing_values(cancer):
    schema = cancer.schema
    X = cancer.train[schema.feature_names].to_numpy(dtype=float, copy=True)
    X[::7, 3] = np.nan  # trees learn where missing values go
    frame = cancer.train.copy()
    frame[schema.feature_names] = X
    tree = Tree.fit(frame, schema, max_depth=6, min_samples_leaf=3, seed=0)
    clf = DecisionTreeClassifier(max_depth=6, min_samples_leaf=3, random_state=0).fit(X, frame[schema.label])
    test = cancer.test[schema.feature_names].to_numpy(dtype=float, copy=True)
    test[::5, 3] = np.nan
    np.testing.assert_allclose(tree.predict_proba(test), clf.predict_proba(test), atol=1e-12)


def test_horizontal_fcdt_is_the_row_weighted_average_of_client_trees(cancer):
    part = partition(cancer, "horizontal", 5, seed=0)
    model = run(part, min_samples_leaf=3)
    assert sorted(model.trees) == [c.client_id for c in part.clients]
    proba = model.predict_proba(cancer.test)
    by_hand = sum(len(c.train) * Tree.fit(c.train, c.schema, None, 3, 0).predict_proba(
        cancer.test[c.schema.feature_names].to_numpy(dtype=float)) for c in part.clients) / len(cancer.train)
    np.testing.assert_allclose(proba, by_hand, atol=1e-12)
    accuracy = float((proba.argmax(1) == cancer.test[cancer.schema.label].to_numpy()).mean())
    print(f"FC[DT] horizontal x5 breast cancer accuracy {accuracy:.3f}")
    assert accuracy > 0.9  # majority class: 0.63
    assert model.info["communication"]["bytes_up"] > 0


def test_vertical_needs_the_label_at_the_clients_that_grow_trees(cancer):
    shared = partition(cancer, "vertical", 3, seed=0, label_to="all")
    model = run(shared)
    assert len(model.trees) == 3 and all(len(ts) == 1 and len(ts[0].columns) < len(cancer.schema.feature_names)
                                         for ts in model.trees.values())
    one = run(partition(cancer, "vertical", 3, seed=0, label_to="client-1"))
    assert list(one.trees) == ["client-1"]
    accuracy = float((model.predict(cancer.test) == cancer.test[cancer.schema.label].to_numpy()).mean())
    assert accuracy > 0.9


def test_vertical_root_multiplies_the_client_trees_as_experts(cancer):
    part = partition(cancer, "vertical", 3, seed=0, label_to="all")
    model = run(part, min_samples_leaf=10)
    assert model.combine == "product" and model.info["combine"] == "product"
    prior = np.bincount(cancer.labels("train")) / len(cancer.train)
    logp = np.log(prior) + sum(
        np.log((1 - PRIOR_MIX) * Tree.fit(c.train, c.schema, None, 10, 0).predict_proba(
            cancer.test[c.schema.feature_names].to_numpy(dtype=float)) + PRIOR_MIX * prior) - np.log(prior)
        for c in part.clients)
    by_hand = np.exp(logp) / np.exp(logp).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(model.predict_proba(cancer.test), by_hand, atol=1e-12)
    mean = run(part, min_samples_leaf=10, combine="mean")
    assert mean.combine == "mean" and not np.allclose(mean.predict_proba(cancer.test), by_hand)
    hybrid = run(partition(cancer, "hybrid", 2, seed=0, label_to="all"), min_samples_leaf=10)
    assert hybrid.combine == "mean"  # shared columns: experts would count their evidence twice
    with pytest.raises(FedpgmError, match="unknown FC\\[DT\\] root 'vote'"):
        run(part, combine="vote")


def test_each_client_picks_its_leaf_size_by_cross_validation():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 3))
    clean = (X[:, 0] + X[:, 1] > 0).astype(int)
    noisy = np.where(rng.random(3000) < 0.3, 1 - clean, clean)  # 30% of labels flipped
    chosen_noisy = choose_min_samples_leaf(X, noisy, None, 0)
    chosen_clean = choose_min_samples_leaf(X, clean, None, 0)
    print("leaf size chosen: noisy labels", chosen_noisy, "clean labels", chosen_clean)
    assert chosen_noisy in LEAF_SIZES and chosen_noisy >= 50  # deep trees overfit the flips
    assert chosen_clean < chosen_noisy
    assert choose_min_samples_leaf(X[:30], clean[:30], None, 0) == 3  # at most a tenth of the rows


def test_leaf_size_follows_the_root(cancer):
    """Bagging (mean root) keeps deep trees; experts (product root) pick calibrated leaves."""
    mean = run(partition(cancer, "horizontal", 2, seed=0))
    assert mean.combine == "mean" and set(mean.info["min_samples_leaf"].values()) == {5}
    product = run(partition(cancer, "vertical", 2, seed=0, label_to="all"))
    chosen = product.info["min_samples_leaf"]
    print("cross-validated leaf sizes", chosen)
    assert product.combine == "product" and sorted(chosen) == ["client-0", "client-1"]
    assert all(v in {min(s, len(cancer.train) // 10) for s in LEAF_SIZES} for v in chosen.values())


def test_save_load_round_trip_and_crafted_files(cancer, tmp_path):
    model = run(partition(cancer, "horizontal", 3, seed=1))
    model.save(tmp_path / "m")
    back = TreeBagging.load(tmp_path / "m")
    np.testing.assert_array_equal(back.predict_proba(cancer.test), model.predict_proba(cancer.test))
    meta = json.loads((tmp_path / "m" / "trees.json").read_text())
    meta["trees"][0]["columns"] = meta["trees"][0]["columns"][:1]  # splits now name unknown columns
    (tmp_path / "m" / "trees.json").write_text(json.dumps(meta))
    with pytest.raises(FedpgmError, match="outside"):
        TreeBagging.load(tmp_path / "m")
    with np.load(tmp_path / "m" / "trees.npz") as z:
        arrays = dict(z)
    arrays["0_left"][0] = 0  # a node that is its own child: a walk would never end
    np.savez(tmp_path / "m" / "trees.npz", **arrays)
    meta["trees"][0]["columns"] = model.trees[meta["trees"][0]["client"]][0].columns
    (tmp_path / "m" / "trees.json").write_text(json.dumps(meta))
    with pytest.raises(FedpgmError, match="follow their parent"):
        TreeBagging.load(tmp_path / "m")
    with pytest.raises(FedpgmError, match="not an FC\\[DT\\] model folder"):
        TreeBagging.load(tmp_path / "nothing")
    model.save(tmp_path / "r")
    meta = json.loads((tmp_path / "r" / "trees.json").read_text())
    meta["combine"] = "vote"
    (tmp_path / "r" / "trees.json").write_text(json.dumps(meta))
    with pytest.raises(FedpgmError, match="trees.json: unknown FC\\[DT\\] root 'vote'"):
        TreeBagging.load(tmp_path / "r")


def test_bagged_trees_are_each_clients_mean_of_bootstrap_trees(cancer, tmp_path):
    part = partition(cancer, "horizontal", 3, seed=0)
    model = run(part, min_samples_leaf=3, trees=4)
    assert model.info["trees_per_client"] == 4 and all(len(ts) == 4 for ts in model.trees.values())
    X = {c.client_id: cancer.test[c.schema.feature_names].to_numpy(dtype=float) for c in part.clients}
    experts = {c.client_id: np.mean([Tree.fit(c.train, c.schema, None, 3, b, bootstrap=True).predict_proba(X[c.client_id])
                                     for b in range(4)], axis=0) for c in part.clients}
    by_hand = sum(len(c.train) * experts[c.client_id] for c in part.clients) / len(cancer.train)
    np.testing.assert_allclose(model.predict_proba(cancer.test), by_hand, atol=1e-12)
    one = run(part, min_samples_leaf=3)
    assert not np.allclose(one.predict_proba(cancer.test), by_hand)  # resampled trees differ from one tree
    # under a product root each client's expert is its trees' mean, at its cross-validated leaf size
    vertical = run(partition(cancer, "vertical", 2, seed=0, label_to="all"), trees=3)
    assert vertical.combine == "product" and all(len(ts) == 3 for ts in vertical.trees.values())
    assert all(len({t.min_samples_leaf for t in ts}) == 1 for ts in vertical.trees.values())
    model.save(tmp_path / "bag")
    back = TreeBagging.load(tmp_path / "bag")
    assert {c: len(ts) for c, ts in back.trees.items()} == {c: 4 for c in model.trees}
    np.testing.assert_array_equal(back.predict_proba(cancer.test), model.predict_proba(cancer.test))
    with pytest.raises(FedpgmError, match="--trees 0: each client fits at least 1 tree"):
        run(part, trees=0)


def test_no_label_anywhere_is_refused(cancer):
    unlabelled = dataclasses.replace(cancer, schema=cancer.schema.with_label(None))
    with pytest.raises(FedpgmError, match="no client holds the label"):
        run(partition(unlabelled, "horizontal", 2, seed=0))

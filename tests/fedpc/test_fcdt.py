import dataclasses
import json

import numpy as np
import pytest
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.tree import DecisionTreeClassifier

from fedpgm.data import load_dataset, partition
from fedpgm.data.policy import ClientPolicy
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation, PrivacyAudit
from fedpgm.fedpc.experiment import FitSettings, run_fcdt
from fedpgm.model_files import SEAL, file_record, seal
from fedpgm.fedpc.experts import BOOSTING, LEAF_SIZES, Expert, choose_min_samples_leaf
from fedpgm.fedpc.trees import PRIOR_MIX, TreeCircuit, fit_fcdt

HANDLERS = "fedpgm.fedpc.client:HANDLERS"


@pytest.fixture(scope="module")
def cancer():
    return load_dataset("breast_cancer", seed=0)


def run(part, **kw) -> TreeCircuit:
    """FC[DT] as the algorithm defines it: the clients' policies allow leaves of any size (the
    default floor of 10 rows has its own test below), the privacy audit on both sides."""
    for c in part.clients:
        c.policy = ClientPolicy(min_rows=1)
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
    tree = Expert.fit(frame, schema, "bagging", max_depth=6, min_samples_leaf=3, seed=0, trees=1)
    clf = DecisionTreeClassifier(max_depth=6, min_samples_leaf=3, random_state=0).fit(X, frame[schema.label])
    test = cancer.test[schema.feature_names].to_numpy(dtype=float, copy=True)
    test[::5, 3] = np.nan
    np.testing.assert_allclose(tree.predict_proba(test), clf.predict_proba(test), atol=1e-12)


def test_horizontal_fcdt_is_the_row_weighted_average_of_client_trees(cancer):
    part = partition(cancer, "horizontal", 5, seed=0)
    model = run(part, min_samples_leaf=3)
    assert sorted(model.experts) == [c.client_id for c in part.clients]
    proba = model.predict_proba(cancer.test)
    by_hand = sum(len(c.train) * Expert.fit(c.train, c.schema, "bagging", None, 3, 0, 1).predict_proba(
        cancer.test[c.schema.feature_names].to_numpy(dtype=float)) for c in part.clients) / len(cancer.train)
    np.testing.assert_allclose(proba, by_hand, atol=1e-12)
    accuracy = float((proba.argmax(1) == cancer.test[cancer.schema.label].to_numpy()).mean())
    print(f"FC[DT] horizontal x5 breast cancer accuracy {accuracy:.3f}")
    assert accuracy > 0.9  # majority class: 0.63
    assert model.info["communication"]["bytes_up"] > 0


def test_vertical_needs_the_label_at_the_clients_that_grow_trees(cancer):
    shared = partition(cancer, "vertical", 3, seed=0, label_to="all")
    model = run(shared)
    assert len(model.experts) == 3 and all(len(e.trees) == 1 and len(e.columns) < len(cancer.schema.feature_names)
                                           for e in model.experts.values())
    one = run(partition(cancer, "vertical", 3, seed=0, label_to="client-1"))
    assert list(one.experts) == ["client-1"]
    accuracy = float((model.predict(cancer.test) == cancer.test[cancer.schema.label].to_numpy()).mean())
    assert accuracy > 0.9


def test_vertical_root_multiplies_the_client_trees_as_experts(cancer):
    part = partition(cancer, "vertical", 3, seed=0, label_to="all")
    model = run(part, min_samples_leaf=10)
    assert model.combine == "product" and model.info["combine"] == "product"
    prior = np.bincount(cancer.labels("train")) / len(cancer.train)
    logp = np.log(prior) + sum(
        np.log((1 - PRIOR_MIX) * Expert.fit(c.train, c.schema, "bagging", None, 10, 0, 1).predict_proba(
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
    back = TreeCircuit.load(tmp_path / "m")
    np.testing.assert_array_equal(back.predict_proba(cancer.test), model.predict_proba(cancer.test))
    meta = json.loads((tmp_path / "m" / "trees.json").read_text())
    edited = json.dumps(meta | {"info": {}})  # the document's own checksum refuses any edit
    (tmp_path / "m" / "trees.json").write_text(edited)
    with pytest.raises(FedpgmError, match="does not match its 'document_sha256'"):
        TreeCircuit.load(tmp_path / "m")
    meta.pop(SEAL)
    columns = meta["experts"][0]["columns"]
    meta["experts"][0]["columns"] = columns[:1]  # splits now name unknown columns
    (tmp_path / "m" / "trees.json").write_text(json.dumps(seal(meta)))
    with pytest.raises(FedpgmError, match="fills for 30 columns, the expert has 1"):
        TreeCircuit.load(tmp_path / "m")
    meta["experts"][0]["columns"] = columns
    (tmp_path / "m" / "trees.json").write_text(json.dumps(seal(meta)))
    with np.load(tmp_path / "m" / "trees.npz") as z:
        arrays = dict(z)
    arrays["0_0_feature"][0] = 30  # a split on a column the client does not hold
    np.savez(tmp_path / "m" / "trees.npz", **arrays)
    with pytest.raises(FedpgmError, match="trees.npz does not match the SHA-256 the model records"):
        TreeCircuit.load(tmp_path / "m")
    rerecord = lambda: (tmp_path / "m" / "trees.json").write_text(json.dumps(  # noqa: E731 (a deliberate editor)
        seal(meta | {"arrays": file_record(tmp_path / "m" / "trees.npz")})))
    rerecord()
    with pytest.raises(FedpgmError, match="a split names a column outside the client's 30"):
        TreeCircuit.load(tmp_path / "m")
    arrays["0_0_feature"][0] = back.experts[meta["experts"][0]["client"]].trees[0].feature[0]
    arrays["0_0_left"][0] = 0  # a node that is its own child: a walk would never end
    np.savez(tmp_path / "m" / "trees.npz", **arrays)
    rerecord()
    with pytest.raises(FedpgmError, match="follow their parent"):
        TreeCircuit.load(tmp_path / "m")
    with pytest.raises(FedpgmError, match="not an FC\\[DT\\] model folder"):
        TreeCircuit.load(tmp_path / "nothing")
    model.save(tmp_path / "r")
    meta = json.loads((tmp_path / "r" / "trees.json").read_text())
    meta.pop(SEAL)
    meta["combine"] = "vote"
    (tmp_path / "r" / "trees.json").write_text(json.dumps(seal(meta)))
    with pytest.raises(FedpgmError, match="trees.json: unknown FC\\[DT\\] root 'vote'"):
        TreeCircuit.load(tmp_path / "r")
    meta["format"] = "fedpgm-fcdt-1"  # per-tree entries, before per-client experts
    (tmp_path / "r" / "trees.json").write_text(json.dumps(seal(meta)))
    with pytest.raises(FedpgmError, match="format 'fedpgm-fcdt-1', expected 'fedpgm-fcdt-3'\\); fit it again"):
        TreeCircuit.load(tmp_path / "r")


def bootstrap_tree(client, b: int) -> DecisionTreeClassifier:
    """Tree b of a client's bagged expert, by hand: rows drawn with replacement by seed b."""
    X = client.train[client.schema.feature_names].to_numpy(dtype=float)
    y = client.train[client.schema.label].to_numpy(dtype=int)
    rows = np.random.default_rng(b).integers(0, len(y), len(y))
    return DecisionTreeClassifier(min_samples_leaf=3, random_state=b).fit(X[rows], y[rows])


def test_bagged_trees_are_each_clients_mean_of_bootstrap_trees(cancer, tmp_path):
    part = partition(cancer, "horizontal", 3, seed=0)
    model = run(part, min_samples_leaf=3, trees=4)
    assert model.info["trees_per_client"] == 4 and all(len(e.trees) == 4 for e in model.experts.values())
    X = {c.client_id: cancer.test[c.schema.feature_names].to_numpy(dtype=float) for c in part.clients}
    experts = {c.client_id: np.mean([bootstrap_tree(c, b).predict_proba(X[c.client_id]) for b in range(4)], axis=0)
               for c in part.clients}
    by_hand = sum(len(c.train) * experts[c.client_id] for c in part.clients) / len(cancer.train)
    np.testing.assert_allclose(model.predict_proba(cancer.test), by_hand, atol=1e-12)
    one = run(part, min_samples_leaf=3)
    assert not np.allclose(one.predict_proba(cancer.test), by_hand)  # resampled trees differ from one tree
    # under a product root each client's expert is its trees' mean, at its cross-validated leaf size
    vertical = run(partition(cancer, "vertical", 2, seed=0, label_to="all"), trees=3)
    assert vertical.combine == "product" and all(len(e.trees) == 3 for e in vertical.experts.values())
    assert set(vertical.info["min_samples_leaf"]) == set(vertical.experts)  # one cross-validated size each
    model.save(tmp_path / "bag")
    back = TreeCircuit.load(tmp_path / "bag")
    assert {c: len(e.trees) for c, e in back.experts.items()} == {c: 4 for c in model.experts}
    np.testing.assert_array_equal(back.predict_proba(cancer.test), model.predict_proba(cancer.test))
    with pytest.raises(FedpgmError, match="--trees 0: each client fits at least 1 tree"):
        run(part, trees=0)


def test_no_label_anywhere_is_refused(cancer):
    unlabelled = dataclasses.replace(cancer, schema=cancer.schema.with_label(None))
    with pytest.raises(FedpgmError, match="no client holds the label"):
        run(partition(unlabelled, "horizontal", 2, seed=0))


def by_hand_boosting(frame, schema, stages: int, fill: np.ndarray) -> GradientBoostingClassifier:
    """scikit-learn's own boosting, with the expert's settings (leaves of at most a tenth of the
    rows), on median-filled rows."""
    X = frame[schema.feature_names].to_numpy(dtype=float)
    leaf = min(BOOSTING["min_samples_leaf"], len(X) // 10)
    return GradientBoostingClassifier(**BOOSTING | {"n_estimators": stages, "random_state": 0,
                                                    "min_samples_leaf": leaf}).fit(
        np.where(np.isnan(X), fill, X), frame[schema.label].to_numpy(dtype=int))


@pytest.mark.parametrize("name", ["breast_cancer", "wine"])
def test_boosted_expert_equals_scikit_learns_gradient_boosting(name):
    ds = load_dataset(name, seed=0)
    schema, frame = ds.schema, ds.train.copy()
    columns = schema.feature_names
    frame.loc[frame.index[::6], columns[2]] = np.nan  # filled with the client's median, before and after
    expert = Expert.fit(frame, schema, "boosting", None, None, seed=0, trees=60)
    np.testing.assert_allclose(expert.fill[2], np.nanmedian(frame[columns[2]]))
    assert expert.min_samples_leaf == min(20, len(frame) // 10)  # wine: 142 rows, leaves of 14
    clf = by_hand_boosting(frame, schema, 60, expert.fill)
    test = ds.test[columns].to_numpy(dtype=float, copy=True)
    test[::4, 2] = np.nan
    filled = np.where(np.isnan(test), expert.fill, test)
    np.testing.assert_allclose(expert.predict_proba(test), clf.predict_proba(filled), atol=1e-10)
    per_stage = 1 if schema[schema.label].cardinality == 2 else schema[schema.label].cardinality
    assert len(expert.trees) == clf.n_estimators_ * per_stage  # early stopping may end before 60 stages
    print(f"{name}: {clf.n_estimators_} boosting stages")
    one_class = frame[frame[schema.label] == 0]  # nothing to boost: smoothed class frequencies
    alone = Expert.fit(one_class, schema, "boosting", None, None, seed=0, trees=60)
    k = schema[schema.label].cardinality
    expected = np.array([len(one_class) + 1.0] + [1.0] * (k - 1)) / (len(one_class) + k)
    assert alone.trees == [] and np.allclose(alone.predict_proba(test[:3]), expected)


def test_boosted_fcdt_joins_each_clients_boosted_expert(cancer, tmp_path):
    part = partition(cancer, "horizontal", 3, seed=0)
    model = run(part, ensemble="boosting", trees=40)
    assert model.info["ensemble"] == "boosting" and model.combine == "mean"
    assert all(0 < n <= 40 for n in model.info["trees_fitted"].values())
    by_hand = sum(len(c.train) * by_hand_boosting(c.train, c.schema, 40, np.zeros(30)).predict_proba(
        cancer.test[c.schema.feature_names].to_numpy(dtype=float)) for c in part.clients) / len(cancer.train)
    proba = model.predict_proba(cancer.test)
    np.testing.assert_allclose(proba, by_hand, atol=1e-10)
    accuracy = float((proba.argmax(1) == cancer.test[cancer.schema.label].to_numpy()).mean())
    print(f"boosted FC[DT] horizontal x3 breast cancer accuracy {accuracy:.3f}")
    assert accuracy > 0.9
    model.save(tmp_path / "boost")
    np.testing.assert_array_equal(TreeCircuit.load(tmp_path / "boost").predict_proba(cancer.test), proba)
    vertical = run(partition(cancer, "vertical", 2, seed=0, label_to="all"), ensemble="boosting")
    assert vertical.combine == "product" and vertical.info["trees_per_client"] == 100
    with pytest.raises(FedpgmError, match="unknown FC\\[DT\\] ensemble 'stacking'"):
        run(part, ensemble="stacking")


def test_hybrid_product_root_divides_by_the_shared_columns_reference(cancer, tmp_path):
    """Hybrid clients share some columns: p(y | x) is proportional to r prod_k p_k / r with r the
    row-weighted mean of the clients' boosted experts on the shared columns."""
    part = partition(cancer, "hybrid", 2, seed=0, label_to="all")
    model = run(part, ensemble="boosting", trees=30)
    shared = [c for c in cancer.schema.feature_names if c in part.params["shared_columns"]]
    assert model.combine == "product" and model.info["reference_columns"] == shared
    assert sorted(model.references) == ["client-0", "client-1"]
    total = sum(len(c.train) for c in part.clients)
    label = cancer.schema.label

    def boosted(c, schema):
        return by_hand_boosting(c.train, schema, 30, np.zeros(len(schema.feature_names))).predict_proba(
            cancer.test[schema.feature_names].to_numpy(dtype=float))

    ref = sum(len(c.train) / total * boosted(c, c.schema.select(shared + [label])) for c in part.clients)
    logp = np.log(ref) + sum(np.log((1 - PRIOR_MIX) * boosted(c, c.schema) + PRIOR_MIX * ref) - np.log(ref)
                             for c in part.clients)
    by_hand = np.exp(logp) / np.exp(logp).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(model.predict_proba(cancer.test), by_hand, atol=1e-10)
    model.save(tmp_path / "hybrid")
    back = TreeCircuit.load(tmp_path / "hybrid")
    assert sorted(back.references) == sorted(model.references)
    np.testing.assert_array_equal(back.predict_proba(cancer.test), model.predict_proba(cancer.test))
    bagged = run(part, min_samples_leaf=10)
    assert bagged.combine == "mean" and not bagged.references  # bagged trees: the mean unless asked
    assert run(part, min_samples_leaf=10, combine="product").references
    with pytest.raises(FedpgmError, match="a product root needs at least two label holders"):
        run(partition(cancer, "horizontal", 2, seed=0), combine="product")


def test_run_fcdt_refuses_unknown_parameters(cancer):
    with pytest.raises(FedpgmError, match=r"unknown FC\[DT\] parameter\(s\) \['ensembel'\]; allowed"):
        run_fcdt(cancer, FitSettings(split="horizontal", clients=2, params={"ensembel": "boosting"}))


def test_single_class_clients_are_named(cancer):
    """Label skew can leave each client one class: its expert cannot tell classes apart."""
    wine = load_dataset("wine", seed=0)
    skewed = run(partition(wine, "horizontal", 5, seed=0, scheme="label-skew"), ensemble="boosting")
    assert skewed.info["single_class_clients"] == [f"client-{i}" for i in range(5)]
    assert all(e.trees == [] for e in skewed.experts.values())  # nothing to boost
    assert run(partition(cancer, "horizontal", 3, seed=0)).info["single_class_clients"] == []


def test_the_clients_floor_raises_small_leaves_and_the_model_says_so(cancer):
    part = partition(cancer, "horizontal", 3, seed=0)
    with InProcessFederation(part, HANDLERS, mode="sequential", audit=PrivacyAudit(part)) as fed:
        model = fit_fcdt(fed, min_samples_leaf=3)
    assert model.info["min_samples_leaf"] == {c.client_id: 10 for c in part.clients}
    assert all(n == ["min_samples_leaf raised from 3 to 10 by the client's policy (min_rows)"]
               for n in model.info["client_policy"].values())
    by_hand = Expert.fit(part.clients[0].train, part.clients[0].schema, "bagging", None, 10, 0, 1)
    X = cancer.test[cancer.schema.feature_names].to_numpy(dtype=float)
    np.testing.assert_allclose(model.experts["client-0"].predict_proba(X), by_hand.predict_proba(X), atol=1e-12)

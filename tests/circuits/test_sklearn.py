"""LearnSPN and RatSPN follow scikit-learn's estimator conventions."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, cross_val_score

from fedpgm.circuits.estimator import LearnSPN, RatSPN
from fedpgm.data import load_dataset
from fedpgm.errors import FedpgmError


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    labels = np.where(y == 1, "benign", "malignant")
    return X[:, :8], labels


def test_clone_params_and_not_fitted():
    model = LearnSPN(min_instances_slice=40, threshold=0.2)
    twin = clone(model)
    assert twin is not model and twin.get_params() == model.get_params()
    assert set(RatSPN().get_params()) >= {"depth", "repetitions", "restarts", "em_iterations"}
    with pytest.raises(NotFittedError, match="not fitted yet; call fit first"):
        model.score(np.zeros((2, 8)))
    with pytest.raises(FedpgmError, match=r"unknown parameter\(s\) \['depth'\]"):
        model.set_params(depth=3)


def test_fit_with_labels_predicts_labels(cancer):
    X, labels = cancer
    model = LearnSPN(min_instances_slice=60, by_label=True).fit(X[:450], labels[:450])
    assert list(model.classes_) == ["benign", "malignant"]
    pred = model.predict(X[450:])
    assert set(pred) <= {"benign", "malignant"} and (pred == labels[450:]).mean() > 0.85
    proba = model.predict_proba(X[450:])
    assert proba.shape == (len(X) - 450, 2) and np.allclose(proba.sum(axis=1), 1)
    joint, marginal = model.score(X[450:], labels[450:]), model.score(X[450:])
    assert joint < marginal  # log p(x, y) <= log p(x)
    assert model.score_samples(X[450:]).shape == (len(X) - 450,)


def test_grid_search_and_cross_validation_on_unlabelled_data(cancer):
    X, _ = cancer
    scores = cross_val_score(LearnSPN(min_instances_slice=80), X, cv=3)
    assert scores.shape == (3,) and np.all(np.isfinite(scores))
    search = GridSearchCV(LearnSPN(), {"min_instances_slice": [40, 200], "threshold": [0.3]}, cv=3).fit(X)
    assert search.best_params_["min_instances_slice"] in (40, 200)
    assert search.best_estimator_.score(X) == pytest.approx(search.best_estimator_.log_likelihood(X).mean())


@pytest.mark.parametrize("estimator", [LearnSPN(min_instances_slice=50), RatSPN()], ids=["LearnSPN", "RatSPN"])
def test_scikit_learn_check_estimator_passes(estimator):
    """scikit-learn's own conventions (input checks, n_features_in_, NotFittedError, clone,
    pickling in memory, ...): every applicable check passes."""
    from sklearn.utils.estimator_checks import check_estimator

    results = check_estimator(estimator, on_fail=None)
    failed = [f"{r['check_name']}: {r['exception']}" for r in results if r["status"] == "failed"]
    assert len(results) >= 30 and not failed, failed


def test_mpe_of_a_frame_is_a_frame_with_named_columns():
    ds = load_dataset("wine", seed=0)
    model = LearnSPN(min_instances_slice=40).fit(ds.train, ds.schema)
    rows = ds.test.iloc[:4, ::-1].copy()  # columns in another order than the schema's
    rows["alcohol"] = np.nan
    filled = model.mpe(rows)
    assert list(filled.columns) == ds.schema.names and (filled.index == rows.index).all()
    assert np.allclose(filled[rows.columns.drop("alcohol")], rows.drop(columns="alcohol"))
    assert filled["alcohol"].notna().all()

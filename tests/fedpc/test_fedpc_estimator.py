"""FederatedPC: scikit-learn's conventions on a federated fit (in-process; Flower in
test_fedpc_flower.py)."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError
from fedpgm.fedpc import FederatedPC
from fedpgm.fedpc.experiment import FitSettings, run_fedpc


@pytest.fixture(scope="module")
def cancer():
    return load_dataset("breast_cancer", seed=0)


@pytest.fixture(scope="module")
def fitted(cancer):
    part = partition(cancer, "vertical", 2, seed=0)
    return FederatedPC(glue="combinatorial", params={"min_instances_slice": 50}).fit(part)


def test_fit_equals_the_experiment_runner_and_answers_every_query(cancer, fitted):
    _, report = run_fedpc(cancer, FitSettings(split="vertical", clients=2, glue="combinatorial", centralized=False,
                                              params={"min_instances_slice": 50}))
    assert fitted.score(cancer.test) == pytest.approx(report["test_loglik"], rel=1e-12)
    assert fitted.communication_["bytes_up"] == report["bytes_up"] and fitted.info_["plan"] == report["plan"]
    labels = fitted.predict(cancer.test)
    truth = np.asarray(cancer.schema["target"].categories, dtype=object)[cancer.test["target"].astype(int)]
    assert set(labels) <= {"malignant", "benign"} and (labels == truth).mean() == pytest.approx(report["accuracy"])
    proba = fitted.predict_proba(cancer.test)
    assert proba.shape == (len(cancer.test), 2) and np.allclose(proba.sum(axis=1), 1)
    draws = fitted.sample(200, seed=1)
    assert list(draws.columns) == fitted.schema_.names and set(draws.columns) == set(cancer.schema.names)
    assert len(draws) == 200 and not draws.isna().any().any()
    # a DataFrame in any column order gets an MPE frame with named columns: nothing to mislabel
    shuffled = cancer.test.iloc[:5, ::-1].copy()
    shuffled["mean_radius"] = np.nan
    filled = fitted.mpe(shuffled)
    assert list(filled.columns) == fitted.schema_.names and (filled.index == shuffled.index).all()
    kept = [c for c in shuffled.columns if c != "mean_radius"]
    assert np.allclose(filled[kept].to_numpy(), shuffled[kept].to_numpy())
    assert filled["mean_radius"].notna().all()


def test_clone_params_and_errors_before_work(cancer):
    model = FederatedPC(clusters=3, seed=4)
    twin = clone(model)
    assert twin.get_params() == model.get_params() and twin is not model
    with pytest.raises(NotFittedError, match="not fitted yet"):
        model.score(cancer.test)
    with pytest.raises(FedpgmError, match="unknown parameter"):
        model.set_params(depth=3)
    part = partition(cancer, "horizontal", 2, seed=0)
    for bad, message in (({"glue": "magic"}, "'glue' parameter"), ({"backend": "grpc"}, "'backend' parameter"),
                         ({"clusters": 0}, "'clusters' parameter"), ({"timeout": -1.0}, "'timeout' parameter")):
        with pytest.raises(FedpgmError, match=message):
            FederatedPC(**bad).fit(part)
    with pytest.raises(FedpgmError, match="takes no y"):
        model.fit(part, cancer.train["target"])
    with pytest.raises(FedpgmError, match="a fedpgm.data.Partition or a partition folder"):
        model.fit(cancer.train)


def test_a_partition_folder_save_and_load(cancer, tmp_path):
    part = partition(cancer, "horizontal", 3, seed=0, scheme="iid")
    part.write(tmp_path / "parts")
    from_folder = FederatedPC(params={"min_instances_slice": 60}, seed=2).fit(tmp_path / "parts")
    from_object = FederatedPC(params={"min_instances_slice": 60}, seed=2).fit(part)
    assert from_folder.score(cancer.test) == pytest.approx(from_object.score(cancer.test), rel=1e-12)
    from_folder.save(tmp_path / "m")
    back = FederatedPC.load(tmp_path / "m")
    assert back.get_params() == from_folder.get_params()
    np.testing.assert_array_equal(back.score_samples(cancer.test), from_folder.score_samples(cancer.test))
    assert isinstance(back.sample(3), pd.DataFrame)

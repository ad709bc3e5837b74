"""The worked example of docs/extending.md: a whole family (handlers, server procedure, report,
command) on both backends."""

from dataclasses import replace

import numpy as np
import pytest
from sklearn.naive_bayes import GaussianNB

from fedpgm.data import load_dataset, partition
from fedpgm.data.policy import ClientPolicy
from fedpgm.federation import ClientFailed, InProcessFederation
from fedpgm.naive_bayes import fit_naive_bayes, fit_report, predict_proba

HANDLERS = "fedpgm.naive_bayes:HANDLERS"


@pytest.fixture(scope="module")
def cancer(tmp_path_factory):
    ds = load_dataset("breast_cancer", seed=0)
    folder = tmp_path_factory.mktemp("nb") / "parts"
    part = partition(ds, "horizontal", 3, seed=0)
    part.write(folder)
    return ds, part, folder


def test_the_federated_model_is_gaussian_nb_on_the_pooled_rows(cancer):
    ds, part, _ = cancer
    columns = [n for n in ds.schema.names if n != "target"]
    with InProcessFederation(part, HANDLERS) as fed:
        model = fit_naive_bayes(fed, "target", columns, 2)
    pooled = GaussianNB().fit(ds.train[columns], ds.train["target"])
    np.testing.assert_allclose(model["prior"], pooled.class_prior_, rtol=1e-12)
    np.testing.assert_allclose(model["mean"], pooled.theta_, rtol=1e-10)
    np.testing.assert_allclose(model["var"], pooled.var_, rtol=1e-7)
    np.testing.assert_allclose(predict_proba(model, ds.test), pooled.predict_proba(ds.test[columns]), atol=1e-8)
    assert model["communication"]["messages"] == 6  # one request and one reply per client


def test_each_client_keeps_classes_too_small_for_its_policy(cancer):
    ds, part, _ = cancer
    columns = ["mean_radius", "mean_area"]
    counts = [np.bincount(c.train["target"].astype(int), minlength=2) for c in part.clients]
    small = int(np.argmin(counts[0]))  # client-0's smaller class stays home under its own policy
    clients = [replace(c, policy=ClientPolicy(min_rows=int(counts[0][small]) + 1)) if i == 0 else c
               for i, c in enumerate(part.clients)]
    with InProcessFederation(clients, HANDLERS) as fed:
        model = fit_naive_bayes(fed, "target", columns, 2)
    expected = sum(counts)
    expected[small] -= counts[0][small]
    assert model["n"] == expected.tolist()
    strict = [replace(c, policy=ClientPolicy(min_rows=int(max(map(max, counts))) + 1)) for c in part.clients]
    with InProcessFederation(strict, HANDLERS) as fed:  # every class of every client is too small
        with pytest.raises(ClientFailed, match="no class has"):
            fit_naive_bayes(fed, "target", columns, 2)


@pytest.mark.slow
def test_the_command_on_both_backends_gives_one_model(cli, cancer, tmp_path, read_report):
    _, _, folder = cancer
    local = fit_report(folder, "inprocess")
    code, _, err = cli("federation", "naive-bayes", folder, "--backend", "flower", "--json", tmp_path / "r.json")
    assert code == 0, err
    report = read_report(tmp_path / "r.json", "federation naive-bayes")
    remote = report["details"]["model"]
    np.testing.assert_allclose(remote["mean"], local["model"]["mean"], rtol=1e-12)
    assert report["metrics"]["accuracy"] == local["accuracy"] > 0.9
    assert report["communication"]["bytes_up"] == local["communication"]["bytes_up"]
    assert report["settings"]["backend"] == "flower" and report["dataset"] == "breast_cancer"

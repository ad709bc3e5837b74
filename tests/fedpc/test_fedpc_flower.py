import importlib.util

import numpy as np
import pytest

from fedpgm.data import load_dataset, partition
from fedpgm.fedpc import FederatedPC
from fedpgm.fedpc.experiment import FitSettings, run_fcdt, run_fedpc
from fedpgm.fedpc.model import FedPC
from fedpgm.fedpc.trees import TreeCircuit


@pytest.mark.slow
def test_fedpc_on_flower_gives_the_in_process_model(tmp_path):
    """run_fedpc in-process against the estimator on Flower (both go through fit_flower's and
    fit_inprocess's one code path: the CLI's --backend flower is covered by the dense test)."""
    ds = load_dataset("wine", seed=0)
    settings = dict(split="hybrid", clients=2, clusters=2, seed=1, centralized=False,
                    params={"min_instances_slice": 30})
    _, local = run_fedpc(ds, FitSettings(backend="inprocess", **settings), out=tmp_path / "local")
    part = partition(ds, "hybrid", 2, seed=1)
    remote = FederatedPC(clusters=2, seed=1, params={"min_instances_slice": 30}, backend="flower").fit(part)
    assert remote.score(ds.test) == pytest.approx(local["test_loglik"], rel=1e-10)
    assert remote.communication_["bytes_up"] == local["bytes_up"]  # the same messages, byte for byte
    remote.save(tmp_path / "flower")
    a, b = FedPC.load(tmp_path / "local"), FederatedPC.load(tmp_path / "flower")
    np.testing.assert_allclose(a.log_likelihood(ds.test), b.score_samples(ds.test), rtol=1e-12)
    assert b.get_params() == remote.get_params() and b.backend == "flower"


@pytest.mark.slow
def test_dense_image_fedpc_on_flower_gives_the_in_process_model(tmp_path):
    """PD clients on digits (a small circuit): the Flower run equals the in-process one."""
    ds = load_dataset("digits", seed=0)
    settings = dict(split="horizontal", clients=2, seed=1, centralized=False, learner="pd",
                    params={"pieces": 2, "units": 2, "epochs": 1, "leaf": "categorical", "device": "cpu"})
    _, local = run_fedpc(ds, FitSettings(backend="inprocess", **settings), out=tmp_path / "local")
    _, remote = run_fedpc(ds, FitSettings(backend="flower", **settings), out=tmp_path / "flower")
    assert remote["backend"] == "flower" and remote["n_params"] == local["n_params"]
    assert remote["test_bpd"] == pytest.approx(local["test_bpd"], rel=1e-6)
    assert remote["bytes_up"] == local["bytes_up"]  # the same messages, byte for byte
    pixels = ds.drop_label()
    a, b = FedPC.load(tmp_path / "local"), FedPC.load(tmp_path / "flower")
    np.testing.assert_allclose(a.log_likelihood(pixels.test), b.log_likelihood(pixels.test), rtol=1e-6)


@pytest.mark.slow
def test_fcdt_on_flower_gives_the_in_process_model(tmp_path):
    ds = load_dataset("breast_cancer", seed=0)
    settings = dict(split="hybrid", clients=2, seed=1, partition={"label_to": "all"},
                    params={"ensemble": "boosting", "trees": 20})
    _, local = run_fcdt(ds, FitSettings(backend="inprocess", **settings), out=tmp_path / "local")
    _, remote = run_fcdt(ds, FitSettings(backend="flower", **settings), out=tmp_path / "flower")
    assert remote["backend"] == "flower" and remote["combine"] == "product"
    assert remote["accuracy"] == local["accuracy"] and remote["f1_macro"] == local["f1_macro"]
    assert remote["bytes_up"] == local["bytes_up"]  # the same messages, byte for byte
    a, b = TreeCircuit.load(tmp_path / "local"), TreeCircuit.load(tmp_path / "flower")
    np.testing.assert_array_equal(a.predict_proba(ds.test), b.predict_proba(ds.test))



@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray (fedpgm[simulation]) is not installed")
def test_fedpc_on_the_simulation_runtime_gives_the_in_process_model(tmp_path):
    ds = load_dataset("breast_cancer", seed=0)
    settings = dict(split="horizontal", clients=3, clusters=2, seed=0, centralized=False,
                    params={"min_instances_slice": 50})
    _, local = run_fedpc(ds, FitSettings(backend="inprocess", **settings))
    _, remote = run_fedpc(ds, FitSettings(backend="simulation", **settings))
    assert remote["backend"] == "simulation"
    assert remote["test_loglik"] == pytest.approx(local["test_loglik"], rel=1e-10)
    assert remote["bytes_up"] == local["bytes_up"]

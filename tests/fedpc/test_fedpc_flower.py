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


@pytest.mark.slow
def test_em_refinement_on_flower_nodes_whose_policy_allows_it_gives_the_in_process_model():
    """Deployed nodes answer EM only where their policy sets ``em`` (``fedpc.client.answers_em``):
    with it set, the federated passes run on the SuperNodes and refine the circuit exactly as
    in-process, where the user's own process is the coordinator and answers by default."""
    from dataclasses import replace

    ds = load_dataset("breast_cancer", seed=0)
    part = partition(ds, "horizontal", 3, seed=0)
    allowing = replace(part, clients=[replace(c, policy=replace(c.policy, em=True)) for c in part.clients])
    settings = dict(seed=0, params={"min_instances_slice": 50}, refine_passes=1)
    local = FederatedPC(**settings).fit(part)
    remote = FederatedPC(**settings, backend="flower").fit(allowing)
    assert local.info_["em"]["passes"] == 1 and remote.info_["em"] == local.info_["em"]  # (the pass was kept)
    np.testing.assert_allclose(remote.score_samples(ds.test), local.score_samples(ds.test), rtol=1e-10)
    # the same requests byte for byte (each reply's CPU seconds, a JSON float, may differ in length)
    assert remote.communication_["bytes_down"] == local.communication_["bytes_down"]

"""The FedPC paper's peers (optional: `bash scripts/install_peers.sh`); skipped when absent."""

import importlib.util

import numpy as np
import pytest

from fedpgm.baselines.fedavg import fedavg, predict_proba
from fedpgm.baselines.fedtree import fedtree_available, fedtree_proba
from fedpgm.baselines.splitnn import opt_in, splitnn
from fedpgm.baselines.tabular import network
from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation, PrivacyAudit

needs_tabnet = pytest.mark.skipif(importlib.util.find_spec("pytorch_tabnet") is None,
                                  reason="pytorch-tabnet not installed (bash scripts/install_peers.sh)")


@pytest.fixture(scope="module")
def cancer():
    return load_dataset("breast_cancer", seed=0)


def accuracy(proba, truth):
    return float((np.asarray(proba).argmax(axis=1) == np.asarray(truth)).mean())


@pytest.mark.skipif(not fedtree_available(), reason="FedTree not installed (bash scripts/install_peers.sh)")
@pytest.mark.parametrize("mode,parties", [("horizontal", 5), ("vertical", 2)])
def test_fedtree_classifies_breast_cancer(cancer, mode, parties):
    proba, seconds = fedtree_proba(cancer.train, cancer.test, cancer.schema, mode, parties)
    assert proba.shape == (len(cancer.test), 2) and seconds > 0
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-6)
    assert accuracy(proba, cancer.test[cancer.schema.label]) > 0.9


def test_fedtree_refuses_hybrid(cancer):
    with pytest.raises(FedpgmError, match="supports"):
        fedtree_proba(cancer.train, cancer.test, cancer.schema, "hybrid", 2)


@needs_tabnet
def test_fedavg_and_splitnn_train_tabnet_and_send_no_rows(cancer):
    part = partition(cancer, "horizontal", 5, seed=0)
    audit = PrivacyAudit(part)
    with InProcessFederation(part, "fedpgm.baselines.fedavg:HANDLERS", audit=audit) as fed:
        result = fedavg(fed, rounds=20, lr=2e-2, batch_size=32, arch="tabnet")
    assert accuracy(predict_proba(result, cancer.test), cancer.test[cancer.schema.label]) > 0.85
    part = partition(cancer, "vertical", 2, seed=0)
    audit_v = PrivacyAudit(part)
    with InProcessFederation(opt_in(part), "fedpgm.baselines.splitnn:HANDLERS", audit=audit_v) as fed:
        result = splitnn(fed, epochs=20, batch_size=64, arch="tabnet")
    assert accuracy(result["test_proba"], result["test_labels"]) > 0.85
    assert audit.checked > 0 and audit_v.checked > 0


def test_unknown_architecture_is_refused():
    with pytest.raises(FedpgmError, match="unknown architecture 'resnet'"):
        network("resnet", 4, 2)

import numpy as np
import pytest

from fedpgm.baselines.fedavg import fedavg, predict_proba
from fedpgm.baselines.splitnn import opt_in, splitnn
from fedpgm.baselines.tabular import get_weights, mlp, n_params
from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation, PrivacyAudit


@pytest.fixture(scope="module")
def cancer():
    return load_dataset("breast_cancer", seed=0)


def labels(ds):
    return ds.test[ds.schema.label].to_numpy()


def test_fedavg_learns_and_sends_only_weights(cancer):
    part = partition(cancer, "horizontal", 3, seed=0)
    audit = PrivacyAudit(part)
    with InProcessFederation(part, "fedpgm.baselines.fedavg:HANDLERS", audit=audit) as fed:
        result = fedavg(fed, rounds=10, epochs=2)
    assert (predict_proba(result, cancer.test).argmax(axis=1) == labels(cancer)).mean() > 0.9
    assert audit.checked > 0
    weights = sum(v.nbytes for v in get_weights(result["model"]).values())
    comm = result["communication"]
    assert comm["rounds"] == 11 and comm["bytes_up"] > 10 * 3 * weights  # every round, every client


def test_splitnn_learns_with_two_messages_per_batch(cancer):
    part = opt_in(partition(cancer, "vertical", 2, seed=0))
    audit = PrivacyAudit(part)
    with InProcessFederation(part, "fedpgm.baselines.splitnn:HANDLERS", audit=audit) as fed:
        result = splitnn(fed, epochs=8, batch_size=128)
    assert (result["test_proba"].argmax(axis=1) == result["test_labels"]).mean() > 0.85
    np.testing.assert_array_equal(np.sort(result["test_labels"]), np.sort(labels(cancer)))
    batches = -(-len(cancer.train) // 128)
    # training traffic: describe (2 clients, both ways) + labels + per batch forward and backward
    assert result["communication"]["messages"] == 4 + 2 + 8 * batches * 8


def test_splitnn_encodes_each_clients_rows_once(cancer, monkeypatch):
    import fedpgm.baselines.splitnn as module

    encoded = []
    real = module.encode
    monkeypatch.setattr(module, "encode", lambda frame, *a: encoded.append(len(frame)) or real(frame, *a))
    part = opt_in(partition(cancer, "vertical", 2, seed=0))
    with InProcessFederation(part, "fedpgm.baselines.splitnn:HANDLERS", mode="sequential") as fed:
        result = splitnn(fed, epochs=3, batch_size=128)
    # per client: the training rows once (for 3 x 4 batches, forward and backward), the test rows once
    assert sorted(encoded) == sorted([len(cancer.train)] * 2 + [len(cancer.test)] * 2)
    assert result["test_proba"].shape == (len(cancer.test), 2)


def test_baselines_refuse_the_wrong_federation(cancer):
    with InProcessFederation(partition(cancer, "vertical", 2, seed=0), "fedpgm.baselines.fedavg:HANDLERS",
                             mode="sequential") as fed:
        with pytest.raises(FedpgmError, match="horizontal federation"):
            fedavg(fed, rounds=1)
    with InProcessFederation(opt_in(partition(cancer, "horizontal", 2, seed=0)), "fedpgm.baselines.splitnn:HANDLERS",
                             mode="sequential") as fed:
        with pytest.raises(FedpgmError, match="same row ids"):
            splitnn(fed, epochs=1)


def test_mlp_size():
    assert n_params(mlp(10, 2, 8, 2)) == 10 * 8 + 8 + 8 * 8 + 8 + 8 * 2 + 2

"""FederatedNGM: scikit-learn's conventions on a federated fit (in-process; Flower in
test_ngm_flower.py)."""

import numpy as np
import pytest
from conftest import SCHEMA, chain_frame
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from fedpgm.data import ClientData, Partition
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation
from fedpgm.ngm import FederatedNGM
from fedpgm.ngm.experiment import server_procedure


def chain_partition(rows: int = 500) -> Partition:
    clients = []
    for k in range(2):
        frame = chain_frame(rows, seed=40 + k)
        frame.index.name = "row_id"
        clients.append(ClientData(f"client-{k}", SCHEMA, frame))
    return Partition("horizontal", SCHEMA, clients, dataset="chain")


@pytest.fixture(scope="module")
def fitted():
    return FederatedNGM(hidden=16, epochs=40, min_clients=2).fit(chain_partition())


def test_fit_equals_the_procedure_and_answers_queries(fitted, tmp_path):
    with InProcessFederation(chain_partition().clients, "fedpgm.ngm.client:HANDLERS", mode="sequential") as fed:
        server_procedure(fed, {"ngm": {"hidden": 16, "epochs": 40, "seed": 0}, "min_clients": 2, "seed": 0},
                         str(tmp_path / "reference"))
    from fedpgm.ngm.model import NGM

    test = chain_frame(400, seed=9)
    reference = NGM.load(tmp_path / "reference")
    np.testing.assert_allclose(fitted.predict(test, "c"), reference.predict(test, "c"), rtol=1e-5, atol=1e-5)
    assert fitted.score(test, "c") > 0.5  # R^2 of c from a, b, k, z: the chain explains most of it
    labels = fitted.predict(test, "k")
    assert set(labels) <= {"lo", "mid", "hi"} and fitted.score(test, "k") > 0.6  # 3 classes: chance ~0.33
    proba = fitted.predict_proba(test, "k")
    assert proba.shape == (400, 3) and np.allclose(proba.sum(axis=1), 1, atol=1e-5)
    with pytest.raises(FedpgmError, match="'c' is numeric"):
        fitted.predict_proba(test, "c")
    draws = fitted.sample(300, seed=2)
    assert list(draws.columns) == SCHEMA.names and len(draws) == 300
    assert abs(np.corrcoef(draws["a"], draws["b"])[0, 1]) > 0.5  # the chain's strongest link is kept
    assert fitted.communication_["bytes_up"] > 0


def test_conventions_refusal_save_and_load(fitted, tmp_path):
    model = FederatedNGM(hidden=8)
    assert clone(model).get_params() == model.get_params()
    with pytest.raises(NotFittedError):
        model.predict(chain_frame(5), "b")
    with pytest.raises(FedpgmError, match="'graph' parameter"):
        FederatedNGM(graph="pc").fit(chain_partition(60))
    with pytest.raises(FedpgmError, match="min-clients 3 must be between 1 and the number of clients"):
        FederatedNGM(min_clients=3).fit(chain_partition(60))
    fitted.save(tmp_path / "m")
    back = FederatedNGM.load(tmp_path / "m")
    assert back.get_params() == fitted.get_params() and back.info_["n_rows"] == fitted.info_["n_rows"]
    test = chain_frame(50, seed=3)
    np.testing.assert_array_equal(back.predict(test, "b"), fitted.predict(test, "b"))

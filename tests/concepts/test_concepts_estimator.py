"""FederatedCM: scikit-learn's conventions on an F-CM fit (in-process)."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from fedpgm.concepts import FederatedCM, federation_of, make_concept_data, run_fcm
from fedpgm.concepts.experiment import FCMSettings
from fedpgm.concepts.federation import RoundSettings
from fedpgm.errors import FedpgmError

ROUNDS = dict(kind="cem", regime="fcm", rounds=6, per_round=3, join_round=3, seed=0)


@pytest.fixture(scope="module")
def asia():
    d = make_concept_data("asia", rows=2000, seed=0)
    return d, FCMSettings(network="asia", rows=2000, clients=6, rounds=RoundSettings(**ROUNDS))


@pytest.fixture(scope="module")
def fitted(asia):
    d, s = asia
    part, late, valid, _ = federation_of(d, s)
    return FederatedCM(**ROUNDS).fit(part, validation=valid, late=late)


def test_fit_equals_run_fcm_and_answers_queries(asia, fitted):
    d, s = asia
    _, report = run_fcm(s, data=d)
    _, _, _, test = federation_of(d, s)
    assert fitted.score(test) == pytest.approx(report["task_accuracy"], abs=1e-6)  # (float32 mean there)
    assert fitted.info_["val_task_loss"] == pytest.approx(report["val_task_loss"], rel=1e-9)
    # the same messages: equal but for each reply's CPU "seconds", whose JSON length varies (and
    # may move the codec's 64-byte array alignment)
    assert fitted.communication_["bytes_up"] == pytest.approx(report["bytes_up"], rel=1e-3)
    labels = fitted.predict(test)
    assert set(labels) <= set(d.states[d.task]) and len(labels) == len(test)
    concepts = fitted.predict_concepts(test)
    assert list(concepts.columns) == fitted.model_.concepts and (concepts.index == test.index).all()
    # intervening with every true concept: the task follows the true parents, accuracy does not drop
    truth = test[fitted.model_.concepts]
    given = np.mean(fitted.predict(test, interventions=truth) == np.asarray(d.states[d.task], dtype=object)[
        test[d.task].astype(int)])
    assert given >= fitted.score(test) - 0.01
    with pytest.raises(FedpgmError, match="cannot intervene on"):
        fitted.predict(test, interventions=test[[d.task]])


def test_conventions_errors_save_and_load(asia, fitted, tmp_path):
    d, s = asia
    part, late, valid, test = federation_of(d, s)
    model = FederatedCM(kind="cgm", rounds=3)
    assert clone(model).get_params() == model.get_params()
    with pytest.raises(NotFittedError):
        model.predict(test)
    with pytest.raises(FedpgmError, match="validation= rows"):
        model.fit(part)
    with pytest.raises(FedpgmError, match="are not in the federation"):
        model.fit(part, validation=valid, late=["client-99"])
    with pytest.raises(FedpgmError, match="'kind' parameter"):
        FederatedCM(kind="xyz").fit(part, validation=valid)
    with pytest.raises(FedpgmError, match="Flower backend only"):
        FederatedCM(secure_aggregation=True).fit(part, validation=valid)
    fitted.save(tmp_path / "m")
    back = FederatedCM.load(tmp_path / "m")
    assert back.get_params() == fitted.get_params()
    assert (back.predict(test) == fitted.predict(test)).all() and back.score(test) == fitted.score(test)

"""FedPC with dense (PD) client circuits on images: the plan combines the clients' circuits."""

import numpy as np
import pytest

from fedpgm.circuits.dense_estimator import DensePC
from fedpgm.data import load_dataset, partition
from fedpgm.federation import InProcessFederation, PrivacyAudit
from fedpgm.fedpc import FedPC, fit_fedpc

HANDLERS = "fedpgm.fedpc.client:HANDLERS"
PARAMS = {"pieces": 4, "units": 3, "epochs": 2, "leaf": "categorical", "device": "cpu"}


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", seed=0)


def run(part, **kw) -> FedPC:
    audit = PrivacyAudit(part)
    with InProcessFederation(part, HANDLERS, mode="sequential", audit=audit) as fed:
        model = fit_fedpc(fed, learner="pd", **kw)
    assert audit.checked > 0  # every message was scanned for raw rows
    return model


def test_horizontal_is_the_size_weighted_mixture_of_the_client_circuits(digits, tmp_path):
    part = partition(digits, "horizontal", 3, seed=0, scheme="label-skew", classes_per_client=4).drop_label()
    test = digits.drop_label().test
    model = run(part, params=PARAMS, seed=1)
    local = [DensePC(**PARAMS, seed=1).fit(c.train, c.schema).log_likelihood(test) for c in part.clients]
    n = np.array([len(c.train) for c in part.clients], float)
    expected = np.logaddexp.reduce(np.stack(local) + np.log(n / n.sum())[:, None], axis=0)
    np.testing.assert_allclose(model.log_likelihood(test), expected, rtol=1e-5)
    assert model.info["n_params"] == 3 * DensePC(**PARAMS).fit(part.clients[0].train, part.clients[0].schema).n_params
    model.save(tmp_path / "m")
    again = FedPC.load(tmp_path / "m")
    np.testing.assert_array_equal(again.log_likelihood(test), model.log_likelihood(test))
    x = test.to_numpy()[:4].copy()
    x[:, 40:] = np.nan
    filled = again.complete(x, "max")
    np.testing.assert_array_equal(filled[:, :40], x[:, :40])
    assert not np.isnan(filled).any() and again.sample(3).shape == (3, 64)
    with InProcessFederation(part, HANDLERS, mode="sequential") as fed:  # circuits kept at the clients
        split = fit_fedpc(fed, learner="pd", params=PARAMS, seed=1, placement="split")
        np.testing.assert_allclose(split.log_likelihood(test), expected, rtol=1e-5)


@pytest.mark.parametrize("split, options", [("vertical", {"regions": "halves"}),
                                            ("hybrid", {"regions": "halves", "band": 1})])
def test_vertical_and_hybrid_image_splits_give_a_normalised_model(digits, split, options):
    """Over a 2 x 4 binarised patch the FedPC's probabilities of every image sum to one."""
    corner = digits.drop_label()
    names = [f"pixel_{r}_{c}" for r in range(3, 5) for c in range(2, 6)]
    small = corner.__class__(corner.name, corner.schema.select(names), corner.train[names] // 9,
                             corner.test[names] // 9)
    small = small.__class__(small.name, small.schema.__class__(small.schema.features, None, 2),
                            small.train, small.test)
    band = {"band": 0} if split == "vertical" else {}
    part = partition(small, split, 2, seed=0, **{**options, **band})
    model = run(part, params={**PARAMS, "pieces": 2}, clusters=2, glue_how="combinatorial", seed=0)
    domain = np.array(np.meshgrid(*[[0, 1]] * 8)).reshape(8, -1).T.astype(float)
    total = np.exp(model.log_likelihood(domain)).sum()
    assert abs(total - 1) < 1e-4, total
    assert len(model.plan.subspaces) == (2 if split == "vertical" else 3)

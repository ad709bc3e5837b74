import itertools

import numpy as np
import pytest

from fedpgm.circuits import CompiledCircuit
from fedpgm.circuits.estimator import LearnSPN
from fedpgm.circuits.queries import log_likelihood
from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError
from fedpgm.federation import ClientFailed, InProcessFederation, PrivacyAudit
from fedpgm.fedpc import fit_fedpc

HANDLERS = "fedpgm.fedpc.client:HANDLERS"


def run(part, **kw):
    audit = PrivacyAudit(part)
    with InProcessFederation(part, HANDLERS, mode="sequential", audit=audit) as fed:
        out = fit_fedpc(fed, **kw)
    assert audit.checked > 0
    return out


def score(result, frame):
    schema = result["schema"]
    return log_likelihood(CompiledCircuit(result["circuit"]), frame[schema.names].to_numpy())


@pytest.fixture(scope="module")
def mixed():
    return load_dataset("synthetic:mixed", rows=2000, seed=0)


def test_horizontal_one_client_equals_the_local_circuit(mixed):
    part = partition(mixed, "horizontal", 1, seed=0)
    out = run(part, clusters=1, seed=3)
    local = LearnSPN(100, 0.3, seed=3).fit(mixed.train, mixed.schema)
    np.testing.assert_allclose(score(out, mixed.test), local.log_likelihood(mixed.test), rtol=1e-10)


def test_horizontal_close_to_centralized(mixed):
    part = partition(mixed, "horizontal", 3, seed=1)
    out = run(part, clusters=2)
    out["circuit"].validate()
    central = LearnSPN().fit(mixed.train, mixed.schema).score(mixed.test)
    assert score(out, mixed.test).mean() > central - 0.5
    assert out["communication"]["bytes_up"] > 0 and out["communication"]["rounds"] == 2


def test_vertical_with_one_cluster_is_the_product_of_the_local_circuits(mixed):
    part = partition(mixed, "vertical", 2, seed=1)
    out = run(part, clusters=1, seed=2)
    expected = sum(LearnSPN(100, 0.3, seed=2).fit(c.train, c.schema).log_likelihood(mixed.test[c.columns])
                   for c in part.clients)
    np.testing.assert_allclose(score(out, mixed.test), expected, rtol=1e-10)
    assert [s["clients"] for s in out["subspaces"]] == [["client-0"], ["client-1"]]


def test_hybrid_builds_shared_sums_and_cluster_products(mixed):
    part = partition(mixed, "hybrid", 2, seed=1, shared=2)
    out = run(part, clusters=2)
    out["circuit"].validate()
    shared = [s for s in out["subspaces"] if len(s["clients"]) == 2]
    assert shared and sum(len(s["features"]) for s in shared) >= 2
    assert np.isfinite(score(out, mixed.test)).all()


def test_small_discrete_case_sums_to_one():
    ds = load_dataset("bn:asia", rows=1500, seed=0)
    for split in ("vertical", "hybrid"):
        part = partition(ds, split, 2, seed=0)
        out = run(part, clusters=2, min_instances_slice=50)
        check_normalised(out)


def check_normalised(out):
    schema = out["schema"]
    grid = np.array(list(itertools.product(*[range(f.cardinality) for f in schema.features])), float)
    total = np.exp(log_likelihood(CompiledCircuit(out["circuit"]), grid)).sum()
    assert total == pytest.approx(1.0, abs=1e-10)


def test_bad_inputs(mixed):
    part = partition(mixed, "vertical", 2, seed=0)
    with pytest.raises(ClientFailed, match="clusters requested but client"):
        run(part, clusters=10_000)
    with pytest.raises(FedpgmError, match="clusters must be >= 1"):
        run(part, clusters=0)
    other = load_dataset("bn:asia", rows=300, seed=0)
    clash = partition(other, "vertical", 2, seed=0)
    from fedpgm.data.schema import Feature, Schema  # one name, two types at two clients
    c = clash.clients[1]
    name = c.schema.names[0]
    feats = [Feature(name, "continuous") if f.name == name else f for f in c.schema.features]
    c.schema = Schema(tuple(feats), c.schema.label)
    clash.clients[0].schema = Schema(tuple(list(clash.clients[0].schema.features)
                                           + [clash.schema[name]]), clash.clients[0].schema.label)
    clash.clients[0].train = clash.clients[0].train.assign(**{name: c.train[name]})
    clash.clients[0].test = None
    with pytest.raises(FedpgmError, match=f"feature '{name}' has different types"):
        run(clash)

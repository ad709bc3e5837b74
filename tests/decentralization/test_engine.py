import math

import numpy as np
import pytest

from fedpgm.decentralization import bruteforce, engine
from fedpgm.decentralization.examples import (example_a, example_a_point, example_b, example_b_point,
                                              max_leakage_bits)
from fedpgm.decentralization.model import (Channel, DiscreteModel, binary_entropy, identity_channel,
                                           xor_channel)
from fedpgm.errors import FedpgmError

VIEWS = [("collab", "collab"), ("collab", "local"), ("local", "collab"), ("local", "local")]


def random_model(seed: int, n: int = 2) -> tuple[DiscreteModel, Channel]:
    rng = np.random.default_rng(seed)
    shape = (2, 3)
    joint = rng.dirichlet(np.ones(6)).reshape(shape)
    groups = rng.integers(0, 3, shape)
    groups.flat[:3] = [0, 1, 2]
    prior = rng.uniform(0.5, 3.0, (3, 2))
    channel = Channel(rng.dirichlet(np.ones(2), size=shape))
    return DiscreteModel(joint, groups, prior, n), channel


@pytest.mark.parametrize("seed", range(4))
def test_engine_equals_brute_force_enumeration(seed):
    model, channel = random_model(seed)
    pz, zs, gz = engine.states(model, channel)
    for k in range(2):
        for train, test in VIEWS:
            tv, sv = engine.view_index(zs, train, k), engine.view_index(zs, test, k)
            exact = engine.conditional_entropy(model, pz, gz, tv, sv)
            brute = bruteforce.entropy(model, pz, gz, tv, sv)
            assert exact == pytest.approx(brute, abs=1e-12)


def assert_ordering(losses):
    lo, hi = (min(losses["CL/DI"], losses["DL/CI"]), max(losses["CL/DI"], losses["DL/CI"]))
    assert losses["CL/CI"] <= lo + 1e-12 and lo <= hi and hi <= losses["DL/DI"] + 1e-12


@pytest.mark.parametrize("seed", range(4))
def test_ordering_on_random_models_without_privacy(seed):
    model, _ = random_model(seed, n=3)
    out = engine.losses(model, identity_channel(model.joint.shape))
    assert_ordering({k: v["loss"] for k, v in out.items()})


@pytest.mark.parametrize("r", [0.5, 0.62, 0.8, 0.95])
def test_example_a_ordering_and_table_one_costs_equal_conditional_mi(r):
    point = example_a_point(r)
    assert_ordering(point["losses_nats"])
    cmi = bruteforce.conditional_mutual_informations(example_a(r))
    for name, per_agent in cmi.items():
        assert point["costs_nats"][name] == pytest.approx(max(per_agent), abs=1e-9)  # symmetric agents
        assert min(per_agent) >= -1e-12
        np.testing.assert_allclose(point["conditional_mi_nats"][name], per_agent, atol=1e-12)


@pytest.mark.parametrize("r", [0.0, 1.0])
def test_all_losses_coincide_at_one_bit(r):
    point = example_a_point(r)
    assert point["mi_bits"] == pytest.approx(1.0)
    values = list(point["losses_nats"].values())
    assert max(values) - min(values) < 1e-12


def test_example_a_mutual_information_matches_definition():
    r = 0.7
    assert example_a_point(r)["mi_bits"] == pytest.approx((math.log(2) - binary_entropy(r)) / math.log(2))


def test_leakage():
    model = example_b(0.5)
    assert max(engine.leakage(model, xor_channel(3, 0.5))) == pytest.approx(0.0, abs=1e-12)
    # with X^ = X, agent k leaks H(X_k | X_-k)
    m = example_a(0.8)
    h = binary_entropy(0.8)  # H(X1 | X2)
    np.testing.assert_allclose(engine.leakage(m, identity_channel((2, 2))), [h, h], atol=1e-12)
    assert max_leakage_bits(model, 0.0) == pytest.approx(1.0)
    assert max_leakage_bits(model, 0.1) < max_leakage_bits(model, 0.05)


def test_example_b_privacy_limits():
    zero = example_b_point(0.5, 0.0)
    values = list(zero["losses_nats"].values())
    assert max(values) - min(values) < 1e-12  # nothing can be shared: everyone is DL/DI
    noiseless = zero["noiseless_leakage_bits"]
    at = example_b_point(0.5, noiseless)
    beyond = example_b_point(0.5, noiseless + 0.4)
    for scheme in at["losses_nats"]:
        assert beyond["losses_nats"][scheme] == pytest.approx(at["losses_nats"][scheme], abs=1e-12)
    mid = example_b_point(0.5, 0.4)
    assert_ordering(mid["losses_nats"])
    assert all(v <= 0.4 + 1e-9 for v in mid["leakage_bits_at_s"].values())
    assert at["losses_nats"]["CL/CI"] < mid["losses_nats"]["CL/CI"] < zero["losses_nats"]["CL/CI"]


@pytest.mark.parametrize("make, message", [
    (lambda: DiscreteModel(np.array([[0.5, 0.6], [0, 0]]), np.zeros((2, 2), int), np.ones((1, 2)), 1),
     "sum to 1"),
    (lambda: DiscreteModel(np.full((2, 2), 0.25), np.zeros((2, 2), int), -np.ones((1, 2)), 1),
     "must be > 0"),
    (lambda: example_a(1.5), r"r must lie in \[0, 1\]"),
    (lambda: xor_channel(3, -0.1), r"noise s must lie in \[0, 1\]"),
    (lambda: example_b_point(0.5, -1.0), "eps must be >= 0"),
    (lambda: engine.losses(example_a(0.7, n=400), identity_channel((2, 2))), "count tables .* lower N"),
])
def test_bad_input(make, message):
    with pytest.raises(FedpgmError, match=message):
        make()

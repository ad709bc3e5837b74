"""Secure aggregation (Flower's SecAgg+): the server's view of each vector is masked, the sum is
exact to SecAgg+'s quantization, a dropped client is recovered, and everything else refuses
clearly."""

import networkx as nx
import numpy as np
import pytest

from fedpgm.concepts.federation import module_groups
from fedpgm.concepts.models import ConceptModel, arrays
from fedpgm.concepts.train import average
from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation, Message
from fedpgm.federation.deploy import LoopbackDeployment
from fedpgm.federation.secagg import CLIP, update_vector
from fedpgm.federation.shares import share_order, weighted_mean, weighted_share

VECTORS = {"client-0": [0.5, -1.25, 3.0, 0.001], "client-1": [1.0, 2.0, -0.75, 7.9],
           "client-2": [0.125, 0.25, 7.5, -8.0]}


@pytest.mark.slow
def test_secure_sum_masks_each_vector_and_survives_a_dropout(tmp_path):
    part = partition(load_dataset("wine"), "horizontal", 3, seed=0)
    part.write(tmp_path / "parts")
    with LoopbackDeployment(tmp_path / "parts", workdir=tmp_path / "dep") as dep:
        out = dep.run("fedpgm.federation.diagnostics:secure_sum_probe", "fedpgm.federation.diagnostics:HANDLERS",
                      {"vectors": VECTORS, "fail": ["client-1"]}, timeout=600)
    assert out["survivors"] == ["client-0", "client-2"]
    assert "client-1" in out["left_out"] and "dropped out of the secure sum" in out["left_out"]["client-1"]
    truth = np.add(VECTORS["client-0"], VECTORS["client-2"])
    np.testing.assert_allclose(out["plain_sum"], truth, atol=0)
    np.testing.assert_allclose(out["sum"], truth, atol=2 * 2 * CLIP / 2**22)  # two clients' quantization
    assert sorted(out["masked"]) == ["client-0", "client-2"]  # the dropped client sent nothing
    assert out["signed"] == ["client-0", "client-2"]  # each survivor signed the request it was sent
    for c, (weight, vector) in out["masked"].items():
        # what the server saw is a uniform draw mod 2^32, not the client's quantized values
        plain = np.round((np.asarray(VECTORS[c]) + CLIP) / (2 * CLIP) * 2**22)
        assert not np.allclose(vector, plain) and max(vector) > 2**22
    assert out["secure_bytes"] > out["plain_bytes"] > 0


def test_secure_sum_is_refused_in_process_and_out_of_range_values_are_refused():
    part = partition(load_dataset("wine"), "horizontal", 2, seed=0)
    with InProcessFederation(part, "fedpgm.federation.diagnostics:HANDLERS", mode="sequential") as fed:
        with pytest.raises(FedpgmError, match="runs on the Flower backend only; use --backend flower"):
            fed.secure_sum("contribute", ["v"], {c: ({"v": np.zeros(2)}, {}) for c in fed.clients})
    reply = Message("x", {"v": np.array([1.0, -9.5])})
    with pytest.raises(FedpgmError, match=r"client 'c' would add a value of magnitude 9.5 .* \[-8.0, 8.0\]"):
        update_vector(reply, ["v"], "c")
    with pytest.raises(FedpgmError, match=r"has no array\(s\) \['w'\]"):
        update_vector(reply, ["w"], "c")


def test_fraction_weighted_sums_give_the_module_wise_average():
    """What F-CM's secure round computes from the sum equals its plain module-wise average."""
    cards = {"a": 2, "b": 3, "t": 2}
    graph = nx.DiGraph([("a", "t"), ("b", "t")])
    models, states, rows = [], [], [40, 100, 60]
    for i, n in enumerate(rows):
        m = ConceptModel("cgm", 5, cards, graph, "t", 8, 4, seed=i)
        names = m.module_names()  # encoder, nodes.a, nodes.b, nodes.t: each client updates three
        models.append(m)
        states.append((arrays(m), [u for j, u in enumerate(names) if j != i + 1], n))
    names = models[0].module_names()
    assert len(names) == 4
    plain = average(states, names)
    total = sum(rows)
    groups = module_groups(models[0], states[0][0])
    shares = [weighted_share(a, n / total, groups, set(units)) for a, units, n in states]
    summed = {k: sum(sh[k] for sh in shares) for k in share_order(list(states[0][0]), groups)}
    secure = weighted_mean(summed, groups, 0.5 * min(rows) / total)
    assert sorted(secure) == sorted(plain)
    for k in plain:
        np.testing.assert_allclose(secure[k], plain[k], rtol=1e-5, atol=1e-6)


def test_one_group_of_weighted_sums_gives_the_row_weighted_average():
    rng = np.random.default_rng(0)
    weights = [{"w": rng.normal(size=(3, 2)), "b": rng.normal(size=2)} for _ in range(3)]
    rows = [10, 30, 60]
    group = {"w": "all", "b": "all"}
    shares = [weighted_share(w, n / 100, group, {"all"}) for w, n in zip(weights, rows)]
    summed = {k: sum(sh[k] for sh in shares) for k in share_order(["w", "b"], group)}
    mean = weighted_mean(summed, group, 0.05)
    for k in ("w", "b"):
        np.testing.assert_allclose(mean[k], sum(n / 100 * w[k] for w, n in zip(weights, rows)), rtol=1e-6)

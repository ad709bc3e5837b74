import importlib.util
from dataclasses import replace

import pytest

from fedpgm.concepts.data import make_concept_data
from fedpgm.concepts.experiment import FCMSettings, run_fcm
from fedpgm.concepts.federation import RoundSettings
from fedpgm.concepts.train import TrainSettings
from fedpgm.errors import FedpgmError


@pytest.mark.slow
def test_fcm_on_flower_with_secure_aggregation_matches_in_process():
    """Module averages by SecAgg+ on Flower: the server sees only sums, and the model equals the
    in-process one (plain averages) to SecAgg+'s quantization."""
    data = make_concept_data("asia", rows=2000, seed=0)
    rounds = RoundSettings(kind="cgm", regime="fcm", rounds=2, per_round=2, join_round=2, patience=4, hidden=8,
                           emb=4, train=TrainSettings(epochs=1, batch_size=256))  # (2 rounds: the join is the 2nd)
    _, local = run_fcm(FCMSettings(network="asia", clients=4, rounds=rounds), data=data)
    secure = replace(rounds, secure_aggregation=True)
    with pytest.raises(FedpgmError, match="runs on the Flower backend only"):
        run_fcm(FCMSettings(network="asia", clients=4, rounds=secure), data=data)
    _, remote = run_fcm(FCMSettings(network="asia", clients=4, rounds=secure, backend="flower"), data=data)
    assert remote["backend"] == "flower" and remote["secure_aggregation"]
    assert remote["bytes_by_message"]["train/secagg"] > 0 and "train" not in remote["bytes_by_message"]
    assert len(remote["connected_at_start"]) == 2  # the 2 late clients' SuperNodes connected at the join
    assert remote["joins"][0]["added"] == local["joins"][0]["added"]  # the late joiners grew the model
    assert remote["rounds"] == local["rounds"] and remote["coverage"] == local["coverage"]
    assert remote["task_accuracy"] == pytest.approx(local["task_accuracy"], abs=0.01)
    assert remote["val_task_loss"] == pytest.approx(local["val_task_loss"], abs=1e-3)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray (fedpgm[simulation]) is not installed")
def test_fcm_on_the_simulation_runtime_matches_in_process():
    """Flower's Simulation Runtime runs every client's node from the start; the late clients
    still join at the join round, and the rounds give the in-process model."""
    data = make_concept_data("asia", rows=1000, seed=1)
    rounds = RoundSettings(kind="cgm", regime="fcm", rounds=3, per_round=2, join_round=2, patience=3, hidden=8,
                           emb=4, train=TrainSettings(epochs=1, batch_size=256))
    _, local = run_fcm(FCMSettings(network="asia", clients=4, rounds=rounds), data=data)
    _, remote = run_fcm(FCMSettings(network="asia", clients=4, rounds=rounds, backend="simulation"), data=data)
    assert remote["backend"] == "simulation"
    assert remote["joins"][0]["added"] == local["joins"][0]["added"]
    assert remote["rounds"] == local["rounds"] and remote["coverage"] == local["coverage"]
    assert remote["val_task_loss"] == pytest.approx(local["val_task_loss"], abs=1e-4)  # float32, other threads
    assert remote["bytes_up"] == local["bytes_up"]


@pytest.mark.slow
def test_a_secure_fcm_round_completes_with_a_client_dropped():
    """One of three clients drops out of the SecAgg+ round (its own policy demands DP, the server
    asks for none, so it refuses after sharing its keys): the others' shares unmask the sum, the
    round goes on with its quorum, and the model is the in-process one over the survivors.
    The Flower side runs through the estimator (FederatedCM, backend="flower")."""
    from fedpgm.concepts import FederatedCM, federation_of
    from fedpgm.concepts.federation import HANDLERS, run_rounds
    from fedpgm.concepts.train import evaluate
    from fedpgm.data.policy import ClientPolicy
    from fedpgm.federation import InProcessFederation

    data = make_concept_data("asia", rows=800, seed=3)
    part, _, valid, _ = federation_of(data, FCMSettings(network="asia", clients=3))
    clients = part.clients
    everyone = [c.client_id for c in clients]
    clients[1].policy = ClientPolicy(max_epsilon=1.0)
    va = data.part(1)
    val = (data.x[va], data.codes[va, data.nodes.index(data.task)])
    r = RoundSettings(kind="cbm", regime="fcm", rounds=1, per_round=3, join_round=5, hidden=8, emb=4,
                      min_clients=2, train=TrainSettings(epochs=1, batch_size=256))
    with InProcessFederation(clients, HANDLERS, mode="sequential") as fed:
        local = run_rounds(fed, everyone, [], data.cards, data.task, data.x.shape[1], val, r)
    remote = FederatedCM(kind="cbm", regime="fcm", rounds=1, per_round=3, join_round=5, hidden=8, emb=4,
                         min_clients=2, epochs=1, batch_size=256, secure_aggregation=True,
                         backend="flower").fit(part, validation=valid)
    assert local["history"][0]["clients"] == [everyone[0], everyone[2]]
    left_out = remote.info_["left_out"]
    assert list(left_out) == [everyone[1]] and "dropped out of the secure sum" in left_out[everyone[1]]
    assert "train" not in remote.communication_["bytes_by_message"]  # only masked vectors carried the update
    assert remote.info_["val_task_loss"][0] == pytest.approx(local["history"][0]["val_task_loss"], abs=1e-4)
    te = data.part(2)  # (weights are compared through what they predict: Adam turns float noise in a
    #                   zero gradient into a full step, so single weights may differ by the learning rate)
    ours, theirs = (evaluate(m, data.x[te], data.codes[te], data.nodes, data.task, data.cards, data.dag)
                    for m in (local["model"], remote.model_))
    assert theirs["task_accuracy"] == pytest.approx(ours["task_accuracy"], abs=0.005)
    assert theirs["concept_accuracy"] == pytest.approx(ours["concept_accuracy"], abs=0.005)

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
    rounds = RoundSettings(kind="cgm", regime="fcm", rounds=4, per_round=2, join_round=2, patience=4, hidden=8,
                           emb=4, train=TrainSettings(epochs=1, batch_size=256))
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

import numpy as np
import pytest
from conftest import SCHEMA, chain_frame

from fedpgm.data import ClientData, Partition
from fedpgm.federation import InProcessFederation
from fedpgm.ngm.experiment import HANDLERS, flower_procedure
from fedpgm.ngm.model import NGM


@pytest.mark.slow
def test_fedngm_on_flower_gives_the_in_process_model(tmp_path):
    from fedpgm.federation.deploy import LoopbackDeployment

    clients = []
    for k in range(2):
        frame = chain_frame(600, seed=20 + k)
        frame.index.name = "row_id"
        clients.append(ClientData(f"client-{k}", SCHEMA, frame))
    Partition("horizontal", SCHEMA, clients, dataset="chain").write(tmp_path / "partition")
    settings = {"ngm": {"hidden": 16, "epochs": 30, "seed": 0}, "min_clients": 2, "seed": 0}
    with InProcessFederation(clients, HANDLERS, mode="sequential") as fed:
        local = flower_procedure(fed, settings, str(tmp_path / "local"))
    with LoopbackDeployment(tmp_path / "partition", workdir=tmp_path / "flower") as dep:
        remote = dep.run("fedpgm.ngm.experiment:flower_procedure", HANDLERS,
                         {"settings": settings, "out": str(tmp_path / "remote")}, timeout=600)
    assert remote["backend"] == "flower" and remote["released"] and local["released"]
    assert remote["merged_edges"] == local["merged_edges"]
    assert remote["info"]["n_rows"] == local["info"]["n_rows"]
    a, b = NGM.load(tmp_path / "local"), NGM.load(tmp_path / "remote")
    test = chain_frame(300, seed=5)
    np.testing.assert_allclose(a.predict(test, "b"), b.predict(test, "b"), rtol=1e-3, atol=1e-3)

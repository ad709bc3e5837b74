import importlib.util

import numpy as np
import pytest
from conftest import SCHEMA, chain_frame

from fedpgm.data import ClientData, Partition
from fedpgm.federation import InProcessFederation
from fedpgm.ngm.experiment import server_procedure
from fedpgm.ngm.graph import recover_graph, to_edges
from fedpgm.ngm.model import NGM


def in_process_reference(tmp_path, rows: int, seed: int, settings: dict) -> tuple[list[ClientData], dict]:
    """Two clients of chain data, written as a partition under ``tmp_path``, and the procedure's
    in-process result (model saved to ``tmp_path / "local"``)."""
    clients = []
    for k in range(2):
        frame = chain_frame(rows, seed=seed + k)
        frame.index.name = "row_id"
        clients.append(ClientData(f"client-{k}", SCHEMA, frame))
    Partition("horizontal", SCHEMA, clients, dataset="chain").write(tmp_path / "partition")
    with InProcessFederation(clients, "fedpgm.ngm.client:HANDLERS", mode="sequential") as fed:
        return clients, server_procedure(fed, settings, str(tmp_path / "local"))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray (fedpgm[simulation]) is not installed")
def test_fedngm_with_secure_graph_votes_on_the_simulation_runtime_gives_the_in_process_model(tmp_path):
    """Flower's Simulation Runtime through the runner (as ``ngm fit --backend simulation`` runs it),
    with the merged graph from a SecAgg+ sum of edge votes: the server sees vote counts only, and
    the model equals the in-process one (graphs in the clear)."""
    from fedpgm.errors import FedpgmError
    from fedpgm.federation.runner import run

    settings = {"ngm": {"hidden": 8, "epochs": 10, "seed": 0}, "min_clients": 2, "seed": 0}
    clients, local = in_process_reference(tmp_path, 400, 30, settings)
    secure = {**settings, "secure_aggregation": True}
    with InProcessFederation(clients, "fedpgm.ngm.client:HANDLERS", mode="sequential") as fed:
        with pytest.raises(FedpgmError, match="runs on the Flower backend only"):
            server_procedure(fed, secure)
    remote = run(Partition("horizontal", SCHEMA, clients, dataset="chain"), "ngm", "ngm",  # (as ngm fit's)
                 {"settings": secure, "out": str(tmp_path / "remote")}, backend="simulation", timeout=600)
    assert remote["backend"] == "simulation" and remote["released"]
    assert remote["merged_edges"] == local["merged_edges"] and remote["info"]["n_rows"] == local["info"]["n_rows"]
    assert "client_edges" not in remote["info"] and remote["info"]["secure_aggregation"]
    held = {}  # edge -> how many client graphs hold it, from each client's own graph
    for c in clients:
        for e in to_edges(recover_graph(c.train, SCHEMA, "glasso", 0.25)):
            held[tuple(e)] = held.get(tuple(e), 0) + 1
    assert sorted(held) == [tuple(e) for e in local["merged_edges"]]
    expected = {str(k): n for k in (1, 2) if (n := sum(1 for v in held.values() if v == k))}
    assert remote["info"]["edge_votes"] == expected
    assert remote["communication"]["bytes_by_message"]["graph_votes/secagg"] > 0
    a, b = NGM.load(tmp_path / "local"), NGM.load(tmp_path / "remote")
    test = chain_frame(200, seed=5)
    np.testing.assert_allclose(a.predict(test, "b"), b.predict(test, "b"), rtol=1e-3, atol=1e-3)

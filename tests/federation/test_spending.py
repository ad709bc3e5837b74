"""A Flower node keeps what its DP training spent in each run beside the runs' folders, and every
run's handlers see the others' (``fedpgm.federation.spending``), so a coordinator cannot reset a
client's budget by starting a new run."""

import pytest
from flwr.app import Context, RecordDict

from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError
from fedpgm.federation import spending
from fedpgm.federation.flower import keep, node_context
from fedpgm.federation.handlers import DP_HISTORY


@pytest.fixture(scope="module")
def node_config(tmp_path_factory):
    part = partition(load_dataset("breast_cancer", seed=0), "horizontal", 2, seed=0)
    folder = tmp_path_factory.mktemp("parts") / "cancer"
    part.write(folder)
    node = tmp_path_factory.mktemp("node")
    return {"client-id": "client-0", "data": str(folder / "client-0.csv"), "schema": str(folder / "manifest.json"),
            "workdir": str(node)}


def context(config: dict, run: int):
    return node_context(Context(run_id=run, node_id=1, node_config=config, state=RecordDict(), run_config={}))


def test_each_run_sees_what_the_nodes_other_runs_spent(node_config):
    first = context(node_config, 7)
    assert first.earlier_dp == []
    first.state[DP_HISTORY] = [[1.2, 0.25, 4]]
    keep(first)
    second = context(node_config, 8)
    assert second.earlier_dp == [[1.2, 0.25, 4]]  # the first run's steps, not its own
    second.state[DP_HISTORY] = [[0.9, 0.5, 2], [0.9, 0.5, 2]]
    keep(second)
    again = context(node_config, 7)  # the first run's next message: its own steps are in its state
    assert again.earlier_dp == [[0.9, 0.5, 2], [0.9, 0.5, 2]] and again.state[DP_HISTORY] == [[1.2, 0.25, 4]]
    assert spending.read(first.workdir.parent) == {"run-7": [[1.2, 0.25, 4]], "run-8": [[0.9, 0.5, 2]] * 2}


def test_a_damaged_spending_file_stops_the_node_with_the_fix(node_config, tmp_path):
    config = {**node_config, "workdir": str(tmp_path)}
    (tmp_path / spending.SPENDING).write_text("{not json")
    with pytest.raises(FedpgmError, match="is not JSON .* restore it from a backup, or delete it"):
        context(config, 1)
    (tmp_path / spending.SPENDING).write_text('{"run-1": 3}')
    with pytest.raises(FedpgmError, match="does not map run ids to lists of DP steps"):
        context(config, 1)

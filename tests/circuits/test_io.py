import json
import pickle

import numpy as np
import pytest
from conftest import discrete_schema, random_circuit

from fedpgm.circuits import CompiledCircuit
from fedpgm.circuits.io import from_payload, load_circuit, save_circuit, save_payload, to_payload
from fedpgm.circuits.queries import log_likelihood
from fedpgm.circuits.estimator import LearnSPN
from fedpgm.data import load_dataset
from fedpgm.errors import FedpgmError


def test_round_trip_is_exact(tmp_path):
    ds = load_dataset("synthetic:mixed", rows=800, seed=0)
    model = LearnSPN(min_instances_slice=50, leaf="histogram").fit(ds.train, ds.schema)
    model.save(tmp_path / "m")
    back = LearnSPN.load(tmp_path / "m")
    assert back.get_params() == model.get_params()
    np.testing.assert_array_equal(back.log_likelihood(ds.test), model.log_likelihood(ds.test))
    assert back.circuit_.stats() == model.circuit_.stats()
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["params.safetensors", "structure.json"]


@pytest.fixture
def saved(tmp_path):
    c = random_circuit(discrete_schema(), 0)
    save_circuit(c, tmp_path / "c")
    return tmp_path / "c"


def edit_structure(folder, fn):
    doc = json.loads((folder / "structure.json").read_text())
    fn(doc)
    (folder / "structure.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["nodes"][-1].update(children=[len(d["nodes"]) + 3]), "children that are not earlier"),
    (lambda d: d["nodes"][0].update(dist="os.system"), "unknown leaf type 'os.system'"),
    (lambda d: d["nodes"][0].update(var=99), "not in the schema"),
    (lambda d: d["nodes"][0].update(type="lambda"), "unknown type 'lambda'"),
    (lambda d: d.update(format="pickle"), "not a fedpgm-circuit/1 or fedpgm-dense-circuit/1 file"),
    (lambda d: d["nodes"].append({"type": "product", "children": [0]}), "not reachable|unused"),
    (lambda d: d["nodes"][0]["shapes"].update({next(iter(d["nodes"][0]["shapes"])): [10**6]}),
     "missing or too short"),
])
def test_crafted_structure_fails_cleanly(saved, edit, message):
    edit_structure(saved, edit)
    with pytest.raises(FedpgmError, match=message):
        load_circuit(saved)


def rerecord(folder):
    """Make structure.json's integrity record match the params file again (what a deliberate
    editor would do), so the checks behind the record are exercised."""
    from fedpgm.model_files import file_record

    edit_structure(folder, lambda d: d.update(params=file_record(folder / "params.safetensors")))


def test_corrupt_or_foreign_params_fail_cleanly(saved):
    data = (saved / "params.safetensors").read_bytes()
    (saved / "params.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(FedpgmError, match="bytes, the model records"):
        load_circuit(saved)
    rerecord(saved)
    with pytest.raises(FedpgmError, match="not a valid safetensors file"):
        load_circuit(saved)
    (saved / "params.safetensors").write_bytes(pickle.dumps({"x": 1}))
    rerecord(saved)
    with pytest.raises(FedpgmError, match="not a valid safetensors file"):
        load_circuit(saved)
    (saved / "structure.json").write_text("{broken")
    with pytest.raises(FedpgmError, match="not valid JSON"):
        load_circuit(saved)


def test_weights_that_do_not_sum_to_one_are_refused(saved, tmp_path):
    from safetensors.numpy import load_file, save_file

    t = load_file(str(saved / "params.safetensors"))
    t["sum_weights"] = t["sum_weights"] * 3
    save_file(t, str(saved / "params.safetensors"))
    with pytest.raises(FedpgmError, match="SHA-256"):
        load_circuit(saved)
    rerecord(saved)
    with pytest.raises(FedpgmError, match="weights must be >= 0, one per child, summing to 1"):
        load_circuit(saved)


def test_missing_folder():
    with pytest.raises(FedpgmError, match="has no structure.json"):
        load_circuit("/no/such/model")


def test_save_replaces_atomically(tmp_path):
    c = random_circuit(discrete_schema(), 1)
    save_circuit(c, tmp_path / "c")
    save_circuit(random_circuit(discrete_schema(), 2), tmp_path / "c")
    back, _ = load_circuit(tmp_path / "c")
    X = np.array([[0, 1, 0, 2]], dtype=float)
    assert log_likelihood(CompiledCircuit(back), X)[0] != log_likelihood(CompiledCircuit(c), X)[0]
    assert [p.name for p in tmp_path.iterdir()] == ["c"]


def test_a_saved_payload_loads_as_the_circuit_and_the_payload_stays_as_sent(tmp_path):
    c = random_circuit(discrete_schema(), 3)
    doc, tensors = to_payload(c)
    sent = json.dumps(doc)
    save_payload(doc, tensors, tmp_path / "c")
    assert json.dumps(doc) == sent  # the message's document carries no file record
    back, _ = load_circuit(tmp_path / "c")
    X = np.array([[0, 1, 0, 2], [1, 0, 1, 0]], dtype=float)
    expected = log_likelihood(CompiledCircuit(c), X)
    np.testing.assert_array_equal(log_likelihood(CompiledCircuit(back), X), expected)
    np.testing.assert_array_equal(log_likelihood(CompiledCircuit(from_payload(doc, tensors, "sent")[0]), X), expected)

"""A saved FedPC tampered with in 49 ways: every case a FedpgmError, in bounded memory."""

import json
import os
import pickle
import shutil
import tracemalloc

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation
from fedpgm.fedpc import FedPC, fit_fedpc
from fedpgm.model_files import SEAL, file_record


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    ds = load_dataset("synthetic:mixed", rows=1500, seed=0)
    with InProcessFederation(partition(ds, "horizontal", 2, seed=0), "fedpgm.fedpc.client:HANDLERS",
                             mode="sequential") as fed:
        model = fit_fedpc(fed, clusters=2, seed=0)
    folder = tmp_path_factory.mktemp("fedpc") / "model"
    model.save(folder)
    return folder


DEEP = "[" * 100_000 + "]" * 100_000


def edit_json(name):
    def deco(fn):
        def apply(folder):
            path = folder / name
            doc = json.loads(path.read_text())
            fn(doc)
            path.write_text(json.dumps(doc))
        return apply
    return deco


def write(name, text):
    return lambda folder: (folder / name).write_text(text)


def params_of(folder):
    return load_file(str(folder / "circuit" / "params.safetensors"))


def edit_params(fn, rerecord=True):
    """Change the arrays; with ``rerecord`` also fix the integrity record (a deliberate editor)."""
    def apply(folder):
        t = params_of(folder)
        fn(t)
        save_file(t, str(folder / "circuit" / "params.safetensors"))
        if rerecord:
            edit_json("circuit/structure.json")(
                lambda d: d.update(params=file_record(folder / "circuit" / "params.safetensors")))(folder)
    return apply


def set_at(key, index, value):
    def fn(t):
        t[key] = t[key].copy()
        t[key][index] = value
    return fn


def grow_sparse(folder):
    """Append 1 GiB (sparse, so the test writes nothing) to the params file."""
    path = folder / "circuit" / "params.safetensors"
    os.truncate(path, path.stat().st_size + 2 ** 30)


def flip_byte(folder):
    path = folder / "circuit" / "params.safetensors"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))


def swap_weights(t):
    w = t["sum_weights"].copy()
    w[[0, 1]] = w[[1, 0]]
    t["sum_weights"] = w


def node_edit(fn):
    return edit_json("circuit/structure.json")(fn)


TAMPER = {
    # fedpc.json
    "fedpc.json removed": lambda f: (f / "fedpc.json").unlink(),
    "fedpc.json not json": write("fedpc.json", "{broken"),
    "fedpc.json nested 1e5 deep": write("fedpc.json", DEEP),
    "fedpc.json a list": write("fedpc.json", "[1, 2]"),
    "fedpc.json with NaN": write("fedpc.json", '{"format": NaN}'),
    "fedpc.json other format": edit_json("fedpc.json")(lambda d: d.update(format="pickle")),
    "fedpc.json schema of other columns": edit_json("fedpc.json")(
        lambda d: d["schema"]["features"][0].update(name="intruder")),
    "fedpc.json without a plan": edit_json("fedpc.json")(lambda d: d.pop("plan")),
    "fedpc.json plan.subspaces a string": edit_json("fedpc.json")(lambda d: d["plan"].update(subspaces="abc")),
    "fedpc.json without its checksum": edit_json("fedpc.json")(lambda d: d.pop(SEAL)),
    "fedpc.json report edited": edit_json("fedpc.json")(lambda d: d["info"].update(glue="edited")),
    "fedpc.json without file records": edit_json("fedpc.json")(lambda d: d.pop("files")),
    "fedpc.json components 10**9": edit_json("fedpc.json")(lambda d: d.update(components=10 ** 9)),
    # circuit/structure.json
    "structure.json removed": lambda f: (f / "circuit" / "structure.json").unlink(),
    "structure.json not json": write("circuit/structure.json", "{broken"),
    "structure.json nested 1e5 deep": write("circuit/structure.json", DEEP),
    "structure.json other format": node_edit(lambda d: d.update(format="fedpgm-circuit/0")),
    "integrity record removed": node_edit(lambda d: d.pop("params")),
    "integrity record of another file": node_edit(lambda d: d["params"].update(sha256="0" * 64)),
    "integrity record with another size": node_edit(lambda d: d["params"].update(bytes=d["params"]["bytes"] + 1)),
    "child after its parent": node_edit(lambda d: d["nodes"][-1].update(children=[len(d["nodes"]) + 3])),
    "leaf type os.system": node_edit(lambda d: d["nodes"][0].update(dist="os.system")),
    "leaf on variable 99": node_edit(lambda d: d["nodes"][0].update(var=99)),
    "node type lambda": node_edit(lambda d: d["nodes"][0].update(type="lambda")),
    "unreachable node": node_edit(lambda d: d["nodes"].append({"type": "product", "children": [0]})),
    "leaf shape 10**6": node_edit(lambda d: d["nodes"][0]["shapes"].update(
        {next(iter(d["nodes"][0]["shapes"])): [10 ** 6]})),
    "negative leaf shape": node_edit(lambda d: d["nodes"][0]["shapes"].update(
        {next(iter(d["nodes"][0]["shapes"])): [-1]})),
    "nodes not a list": node_edit(lambda d: d.update(nodes={"0": 1})),
    "children not a list": node_edit(lambda d: d["nodes"][-1].update(children="0")),
    # params.safetensors, bytes changed (record left as written)
    "params removed": lambda f: (f / "circuit" / "params.safetensors").unlink(),
    "params truncated": lambda f: os.truncate(f / "circuit" / "params.safetensors", 100),
    "params one byte flipped": flip_byte,
    "params grown by 1 GiB": grow_sparse,
    "params replaced by a pickle": lambda f: (f / "circuit" / "params.safetensors").write_bytes(
        pickle.dumps({"sum_weights": [1.0]})),
    "two sum weights swapped": edit_params(swap_weights, rerecord=False),
    "params of another model": edit_params(lambda t: t.update(sum_weights=np.full_like(t["sum_weights"], 0.5)),
                                           rerecord=False),
    # params edited and the record fixed to match: the checks behind the record
    "NaN sum weight": edit_params(set_at("sum_weights", 0, np.nan)),
    "negative sum weight": edit_params(set_at("sum_weights", 0, -0.5)),
    "sum weights times 3": edit_params(lambda t: t.update(sum_weights=t["sum_weights"] * 3)),
    "infinite std": edit_params(set_at("leaf.gaussian.std", 0, np.inf)),
    "std 1e-300": edit_params(set_at("leaf.gaussian.std", 0, 1e-300)),
    "zero std": edit_params(set_at("leaf.gaussian.std", 0, 0.0)),
    "NaN mean": edit_params(set_at("leaf.gaussian.mean", 0, np.nan)),
    "infinite mean": edit_params(set_at("leaf.gaussian.mean", 0, -np.inf)),
    "NaN category probability": edit_params(set_at("leaf.categorical.probs", 0, np.nan)),
    "negative category probability": edit_params(set_at("leaf.categorical.probs", 0, -0.1)),
    "extra tensor": edit_params(lambda t: t.update(extra=np.zeros(3))),
    "missing tensor": edit_params(lambda t: t.pop("leaf.gaussian.std")),
    "tensor too short": edit_params(lambda t: t.update(sum_weights=t["sum_weights"][:-1])),
}


def test_the_tamper_set_has_the_issues_43_cases():
    assert len(TAMPER) >= 43


@pytest.mark.parametrize("case", sorted(TAMPER))
def test_tampered_fedpc_is_refused_in_bounded_memory(saved, tmp_path, case):
    folder = tmp_path / "model"
    shutil.copytree(saved, folder)
    FedPC.load(folder)  # the copy loads before the tampering
    TAMPER[case](folder)
    tracemalloc.start()
    try:
        with pytest.raises(FedpgmError) as err:
            FedPC.load(folder)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "\n" not in str(err.value)
    assert peak < 64 * 2 ** 20, f"{case}: loading took {peak / 2 ** 20:.0f} MiB before refusing"

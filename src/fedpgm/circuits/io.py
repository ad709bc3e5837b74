"""Circuit files: ``structure.json`` (nodes, schema) + ``params.safetensors`` (numbers).

A dense circuit (``fedpgm.circuits.dense``) is written the same way: ``structure.json`` holds its
spec (region graph, K, input kind, schema and columns), ``params.safetensors`` its state arrays.

Parameters are packed per kind into a few flat arrays (``sum_weights``; per leaf type and
parameter, e.g. ``leaf.gaussian.mean``) consumed in node order, so a circuit with 10^5 nodes is
still a handful of tensors. Loading never executes anything (JSON and safetensors only) and
checks everything: format tag, node types, child order, variables, leaf types, that the packed
arrays are consumed exactly, that every number is finite, and finally the circuit's validity
(weights, smoothness, decomposability, leaf parameters such as std >= ``MIN_STD``); a crafted or
corrupt file fails with one clear ``FedpgmError``. ``structure.json`` records the size and SHA-256
of ``params.safetensors`` (``fedpgm.model_files``), checked before the arrays are read.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from fedpgm.circuits.dense import DenseCircuit
from fedpgm.circuits.leaves import LEAF_TYPES
from fedpgm.circuits.structure import Circuit, Leaf, Product, Sum
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.files import atomic_folder
from fedpgm.model_files import check_file, file_record, read_json

FORMAT = "fedpgm-circuit/1"
DENSE_FORMAT = "fedpgm-dense-circuit/1"  # a dense circuit: its spec (region graph, K, inputs) + state arrays
STRUCTURE, PARAMS = "structure.json", "params.safetensors"


def to_payload(circuit: Circuit | DenseCircuit, meta: dict | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """The structure document and the packed parameter arrays (what files and messages carry)."""
    if isinstance(circuit, DenseCircuit):
        return {"format": DENSE_FORMAT, "spec": circuit.spec(), "meta": meta or {}}, circuit.arrays()
    circuit.validate()
    nodes: list[dict] = []
    packs: dict[str, list] = {"sum_weights": []}
    for node in circuit.nodes:
        if isinstance(node, Leaf):
            shapes = {}
            for name, value in node.params.items():
                packs.setdefault(f"leaf.{node.dist}.{name}", []).append(np.ravel(value))
                shapes[name] = list(np.shape(value))
            nodes.append({"type": "leaf", "var": node.var, "dist": node.dist, "shapes": shapes})
        elif isinstance(node, Sum):
            packs["sum_weights"].append(node.weights)
            nodes.append({"type": "sum", "children": node.children})
        else:
            nodes.append({"type": "product", "children": node.children})
    tensors = {k: np.concatenate(v).astype(np.float64) if v else np.zeros(0) for k, v in packs.items()}
    doc = {"format": FORMAT, "schema": circuit.schema.to_dict(), "nodes": nodes, "meta": meta or {}}
    return doc, tensors


def save_circuit(circuit: Circuit | DenseCircuit, folder: str | Path, meta: dict | None = None) -> Path:
    """Write the two files into ``folder`` (replaced atomically if it exists)."""
    return save_payload(*to_payload(circuit, meta), folder)


def save_payload(doc: dict, tensors: dict[str, np.ndarray], folder: str | Path) -> Path:
    """Write a payload of ``to_payload`` as the two files into ``folder`` (replaced atomically)."""
    folder = Path(folder)
    with atomic_folder(folder) as tmp:
        save_file(tensors, str(tmp / PARAMS))
        (tmp / STRUCTURE).write_text(json.dumps({**doc, "params": file_record(tmp / PARAMS)}, separators=(",", ":")))
    return folder


def load_circuit(folder: str | Path) -> tuple[Circuit | DenseCircuit, dict]:
    """Read a saved circuit and its ``meta``; every inconsistency is a ``FedpgmError``."""
    folder = Path(folder)
    where = f"circuit file in {folder}"
    for name in (STRUCTURE, PARAMS):
        if not (folder / name).is_file():
            raise FedpgmError(f"{folder} has no {name}; pass a folder written by fedpgm (pc fit --out)")
    doc = read_json(folder / STRUCTURE)
    if not isinstance(doc, dict) or doc.get("format") not in (FORMAT, DENSE_FORMAT):
        raise FedpgmError(f"{where}: not a {FORMAT} or {DENSE_FORMAT} file")
    check_file(folder / PARAMS, doc.get("params"), where)
    try:
        tensors = load_file(str(folder / PARAMS))
    except (SafetensorError, OSError, ValueError) as e:
        raise FedpgmError(f"{where}: {PARAMS} is not a valid safetensors file ({e})") from None
    return from_payload(doc, tensors, where)


def from_payload(doc, tensors: dict[str, np.ndarray], where: str = "circuit") -> tuple[Circuit | DenseCircuit, dict]:
    """Rebuild a circuit from ``to_payload``'s output, checking everything (see module doc)."""
    if isinstance(doc, dict) and doc.get("format") == DENSE_FORMAT:
        if not isinstance(doc.get("spec"), dict):
            raise FedpgmError(f"{where}: a dense circuit file needs its 'spec'")
        model = DenseCircuit.from_spec(doc["spec"])
        model.load_arrays(tensors, where)
        return model, doc.get("meta", {})
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise FedpgmError(f"{where}: not a {FORMAT} file")
    try:
        circuit = Circuit(Schema.from_dict(doc["schema"]))
        cursor = {k: 0 for k in tensors}

        def take(key: str, size: int) -> np.ndarray:
            if key not in tensors or cursor[key] + size > tensors[key].size:
                raise FedpgmError(f"{where}: parameter array '{key}' is missing or too short")
            out = tensors[key][cursor[key]: cursor[key] + size]
            cursor[key] += size
            return out.astype(float)

        bad = [k for k, v in tensors.items() if not np.isfinite(np.asarray(v, dtype=float)).all()]
        if bad:
            raise FedpgmError(f"{where}: parameter array(s) {bad} hold NaN or infinite values")

        for i, nd in enumerate(doc["nodes"]):
            kind = nd.get("type") if isinstance(nd, dict) else None
            if kind == "leaf":
                if nd["dist"] not in LEAF_TYPES:
                    raise FedpgmError(f"{where}: node {i} has unknown leaf type {nd['dist']!r}")
                if not isinstance(nd["var"], int) or not 0 <= nd["var"] < len(circuit.schema):
                    raise FedpgmError(f"{where}: node {i} uses variable {nd['var']!r}, not in the schema")
                params = {}
                for name, shape in nd["shapes"].items():
                    shape = [int(s) for s in shape]
                    if any(s < 0 for s in shape):
                        raise FedpgmError(f"{where}: node {i} has a negative shape")
                    size = int(np.prod(shape)) if shape else 1
                    params[name] = take(f"leaf.{nd['dist']}.{name}", size).reshape(shape)
                circuit.nodes.append(Leaf(nd["var"], nd["dist"], params))
            elif kind in ("sum", "product"):
                children = nd["children"]
                if not isinstance(children, list) or not all(isinstance(c, int) and 0 <= c < i for c in children):
                    raise FedpgmError(f"{where}: node {i} has children that are not earlier nodes")
                if kind == "sum":
                    circuit.nodes.append(Sum(list(children), take("sum_weights", len(children))))
                else:
                    circuit.nodes.append(Product(list(children)))
            else:
                raise FedpgmError(f"{where}: node {i} has unknown type {kind!r}")
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, FedpgmError):
            raise
        raise FedpgmError(f"{where}: malformed node list ({type(e).__name__}: {e})") from None
    left = {k: v.size - cursor[k] for k, v in tensors.items() if v.size != cursor[k]}
    if left:
        raise FedpgmError(f"{where}: parameter arrays have unused values {left}")
    circuit.validate()
    return circuit, doc.get("meta", {})

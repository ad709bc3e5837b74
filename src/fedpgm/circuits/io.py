"""Circuit files: ``structure.json`` (nodes, schema) + ``params.safetensors`` (numbers).

A dense circuit (``fedpgm.circuits.dense``) is written the same way: ``structure.json`` holds its
spec (region graph, K, input kind, schema and columns), ``params.safetensors`` its state arrays.
``FORMATS`` is the registry: each circuit names its ``format`` (``fedpgm.circuits.protocol``), and
a file is read by the format it records.

Parameters are packed per kind into a few flat arrays (``sum_weights``; per leaf type and
parameter, e.g. ``leaf.gaussian.mean``) consumed in node order, so a circuit with 10^5 nodes is
still a handful of tensors. Loading never executes anything (JSON and safetensors only) and
checks everything: every field's type and allowed values (format tag, node types, child order,
variables, leaf types and shapes; a dense spec's region graph, K, inputs and their size, which
may not exceed what the arrays hold, so nothing is allocated for a spec the file cannot back;
``meta``'s estimator, given the classes a loader answers with (``learners.load_model``'s), one
of them for this kind of circuit, and its parameters, checked as that estimator checks them),
that the packed arrays are consumed exactly, that every number is finite, and finally the
circuit's validity (weights, smoothness, decomposability, leaf parameters such as
std >= ``MIN_STD``); a crafted or corrupt file fails with one clear ``FedpgmError`` naming the
file and the field. ``structure.json`` records the size and SHA-256 of ``params.safetensors``
(checked before the arrays are read) and its own checksum (``fedpgm.model_files.seal``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from fedpgm.circuits.dense import DenseCircuit
from fedpgm.circuits.dense_inputs import INPUT_LAYERS
from fedpgm.circuits.leaves import LEAF_TYPES
from fedpgm.circuits.region_graph import RegionGraph
from fedpgm.circuits.nodes import Leaf, Product, Sum
from fedpgm.circuits.protocol import CircuitModel
from fedpgm.circuits.structure import Circuit
from fedpgm.errors import FedpgmError
from fedpgm.files import atomic_folder
from fedpgm.model_files import (SEAL, BadModelFile, check_file, check_keys, check_seal, file_record, need,
                                need_float, need_int, need_list, read_json, schema_of, seal)

STRUCTURE, PARAMS = "structure.json", "params.safetensors"
FILE_KEYS = ("params", SEAL)  # what a file adds to a payload's document
SPEC_KEYS = ("graph", "units", "input", "levels", "input_options", "schema", "columns")
MAX_UNITS, MAX_LEVELS, MAX_DIMS, MAX_SIZE = 2 ** 16, 2 ** 16, 8, 2 ** 40


@dataclass(frozen=True)
class Format:
    """How one circuit representation (its ``format``, ``fedpgm.circuits.protocol``) is written
    and read: its document's fields, and the two halves of a payload."""

    keys: tuple[str, ...]  # the document's fields (besides FILE_KEYS)
    dense: bool  # its circuits' ``dense`` (whose estimators may be named in ``meta``)
    write: Callable[[Any], tuple[dict, dict[str, np.ndarray]]]  # circuit -> (document fields, arrays)
    read: Callable[[dict, dict[str, np.ndarray], str, dict], Any]  # (document, arrays, where, meta) -> circuit


def to_payload(circuit: CircuitModel, meta: dict | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """The structure document and the packed parameter arrays (what files and messages carry)."""
    fields, tensors = FORMATS[circuit.format].write(circuit)
    return {"format": circuit.format, **fields, "meta": meta or {}}, tensors


def save_circuit(circuit: CircuitModel, folder: str | Path, meta: dict | None = None) -> Path:
    """Write the two files into ``folder`` (replaced atomically if it exists)."""
    return save_payload(*to_payload(circuit, meta), folder)


def save_payload(doc: dict, tensors: dict[str, np.ndarray], folder: str | Path) -> Path:
    """Write a payload of ``to_payload`` as the two files into ``folder`` (replaced atomically)."""
    folder = Path(folder)
    with atomic_folder(folder) as tmp:
        save_file(tensors, str(tmp / PARAMS))
        sealed = seal({**doc, "params": file_record(tmp / PARAMS)})
        (tmp / STRUCTURE).write_text(json.dumps(sealed, separators=(",", ":")))
    return folder


def load_circuit(folder: str | Path, estimators: dict[str, Any] | None = None) -> tuple[Circuit | DenseCircuit, dict]:
    """Read a saved circuit and its ``meta``; every inconsistency is a ``FedpgmError``.
    ``estimators``: the classes ``meta`` may name, by the name ``save`` records (``check_meta``)."""
    folder = Path(folder)
    where = str(folder / STRUCTURE)
    for name in (STRUCTURE, PARAMS):
        if not (folder / name).is_file():
            raise FedpgmError(f"{folder} has no {name}; pass a folder written by fedpgm (pc fit --out)")
    doc = read_json(folder / STRUCTURE)
    check_document(doc, where, FILE_KEYS)
    check_file(folder / PARAMS, doc.get("params"), where)
    try:
        tensors = load_file(str(folder / PARAMS))
    except (SafetensorError, OSError, ValueError) as e:
        raise FedpgmError(f"{where}: {PARAMS} is not a valid safetensors file ({e})") from None
    model, meta = from_payload(doc, tensors, where, estimators)
    check_seal(doc, where)
    return model, meta


def check_document(doc, where: str, optional=()) -> str:
    """The document's format, after checking it has exactly that format's keys."""
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise FedpgmError(f"{where}: not a {' or '.join(FORMATS)} file")
    check_keys(doc, where, "document", FORMATS[fmt].keys, optional)
    return fmt


def from_payload(doc, tensors: dict[str, np.ndarray], where: str = "circuit",
                 estimators: dict[str, Any] | None = None) -> tuple[Circuit | DenseCircuit, dict]:
    """Rebuild a circuit from ``to_payload``'s output, checking everything (see module doc)."""
    fmt = check_document(doc, where, FILE_KEYS)
    meta = check_meta(doc["meta"], FORMATS[fmt].dense, where, estimators)
    check_arrays(tensors, where)
    return FORMATS[fmt].read(doc, tensors, where, meta), meta


def check_arrays(tensors, where: str) -> None:
    """Named float arrays, every value finite."""
    for k, v in tensors.items():
        if not isinstance(k, str) or not isinstance(v, np.ndarray) or v.dtype.kind != "f":
            raise FedpgmError(f"{where}: parameter array {str(k)[:40]!r} is not an array of floats")
    bad = [k for k, v in tensors.items() if not np.isfinite(v).all()]
    if bad:
        raise FedpgmError(f"{where}: parameter array(s) {bad[:5]} hold NaN or infinite values")


# -- meta: the estimator that saved the circuit -----------------------------------------------
def check_meta(meta, dense: bool, where: str, estimators: dict[str, Any] | None = None) -> dict:
    """``{}`` or ``{"estimator": a name, "params": an object}``; given ``estimators`` (classes by
    the name ``save`` records), a name among those of this kind of circuit (their ``dense``) and
    parameters valid for it."""
    check_keys(meta, where, "meta", (), ("estimator", "params"))
    if not meta:
        return meta
    check_keys(meta, where, "meta", ("estimator", "params"))
    name = need(meta["estimator"], str, where, "meta.estimator")
    params = need(meta["params"], dict, where, "meta.params", "an object")
    if estimators is None:
        return meta
    registry = {k: cls for k, cls in estimators.items() if cls.dense == dense}
    if name not in registry:
        raise BadModelFile(f"{where}: field 'meta.estimator' is {name[:60]!r}; a "
                           f"{'dense' if dense else 'node'} circuit's estimator is one of {sorted(registry)}")
    missing = sorted(set(registry[name]._get_param_names()) - set(params))
    if missing:
        raise BadModelFile(f"{where}: field 'meta.params' lacks {missing[:5]}; {name} saves all its parameters")
    try:
        registry[name]().set_params(**params).check_params()
    except (TypeError, ValueError) as e:  # (FedpgmError is a ValueError)
        raise BadModelFile(f"{where}: field 'meta.params' is not valid for {name}: {str(e)[:300]}") from None
    return meta


# -- node circuits ------------------------------------------------------------------------------
def node_payload(circuit: Circuit) -> tuple[dict, dict[str, np.ndarray]]:
    """A node circuit's document fields and packed arrays (module doc)."""
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
    return {"schema": circuit.schema.to_dict(), "nodes": nodes}, tensors


def node_circuit(doc: dict, tensors: dict[str, np.ndarray], where: str, meta: dict) -> Circuit:
    """The circuit of a node document, its packed arrays consumed exactly (``meta``: unused)."""
    circuit = Circuit(schema_of(doc["schema"], where))
    nodes = need_list(doc["nodes"], where, "nodes")
    if not nodes:
        raise BadModelFile(f"{where}: field 'nodes' is empty")
    cursor = {k: 0 for k in tensors}

    def take(key: str, shape: list[int]) -> np.ndarray:
        size = math.prod(shape)
        if key not in tensors or cursor[key] + size > tensors[key].size:
            raise FedpgmError(f"{where}: parameter array '{key[:60]}' is missing or too short")
        out = tensors[key].reshape(-1)[cursor[key]: cursor[key] + size]
        cursor[key] += size
        return out.astype(float).reshape(shape)

    for i, nd in enumerate(nodes):
        circuit.nodes.append(node_of(nd, i, len(circuit.schema), take, where))
    left = {k: v.size - cursor[k] for k, v in tensors.items() if v.size != cursor[k]}
    if left:
        raise FedpgmError(f"{where}: parameter arrays have unused values {left}")
    try:
        circuit.validate()
    except (KeyError, TypeError, ValueError, IndexError) as e:  # (FedpgmError is a ValueError)
        what = str(e)[:300] if isinstance(e, FedpgmError) else f"invalid circuit ({type(e).__name__}: {str(e)[:300]})"
        raise FedpgmError(f"{where}: {what}") from None
    return circuit


def node_of(nd, i: int, n_vars: int, take, where: str) -> Leaf | Sum | Product:
    """Node ``i`` of the document, its fields checked; ``take(key, shape)`` reads its numbers."""
    kind = nd.get("type") if isinstance(nd, dict) else None
    if kind == "leaf":
        check_keys(nd, where, f"nodes[{i}]", ("type", "var", "dist", "shapes"))
        dist, var = nd["dist"], nd["var"]
        if not isinstance(dist, str) or dist not in LEAF_TYPES:
            raise FedpgmError(f"{where}: node {i} has unknown leaf type {repr(dist)[:60]}")
        if not isinstance(var, int) or isinstance(var, bool) or not 0 <= var < n_vars:
            raise FedpgmError(f"{where}: node {i} uses variable {repr(var)[:60]}, not in the schema")
        need(nd["shapes"], dict, where, f"nodes[{i}].shapes", "an object")
        shapes = {k: need_list(s, where, f"nodes[{i}].shapes.{k[:40]}", int) for k, s in nd["shapes"].items()}
        for k, s in shapes.items():
            if len(s) > MAX_DIMS or any(not 0 <= d <= MAX_SIZE for d in s):
                raise BadModelFile(f"{where}: field 'nodes[{i}].shapes.{k[:40]}' is not a shape of at most "
                                   f"{MAX_DIMS} sizes 0..{MAX_SIZE}")
        return Leaf(var, dist, {k: take(f"leaf.{dist}.{k}", s) for k, s in shapes.items()})
    if kind in ("sum", "product"):
        check_keys(nd, where, f"nodes[{i}]", ("type", "children"))
        children = nd["children"]
        if not isinstance(children, list) or not all(
                isinstance(c, int) and not isinstance(c, bool) and 0 <= c < i for c in children):
            raise FedpgmError(f"{where}: node {i} has children that are not earlier nodes")
        if kind == "sum":
            return Sum(list(children), take("sum_weights", [len(children)]))
        return Product(list(children))
    raise FedpgmError(f"{where}: node {i} has unknown type {repr(kind)[:60]}")


# -- dense circuits: the spec, checked and sized before anything is allocated -----------------
def dense_payload(circuit: DenseCircuit) -> tuple[dict, dict[str, np.ndarray]]:
    """A dense circuit's spec (region graph, K, inputs, schema and columns) and state arrays."""
    return {"spec": circuit.spec()}, circuit.arrays()


def dense_circuit(doc: dict, tensors: dict[str, np.ndarray], where: str, meta: dict) -> DenseCircuit:
    """The dense circuit of a spec document, sized from its arrays before anything is allocated."""
    if meta and isinstance(doc["spec"], dict) and doc["spec"].get("schema") is None:
        raise BadModelFile(f"{where}: field 'spec.schema' is null, but {meta['estimator']} needs its variables")
    budget = sum(int(v.nbytes) for v in tensors.values())
    model = DenseCircuit.from_spec(doc["spec"], where, dense_graph(doc["spec"], budget, where))
    model.load_arrays(tensors, where)
    return model


def dense_graph(spec, budget: int, where: str) -> RegionGraph:
    """The region graph of a dense spec whose every field is checked, and whose parameters
    (``spec_bytes``) fit in ``budget`` bytes (what the arrays hold)."""
    check_keys(spec, where, "spec", SPEC_KEYS)
    units = need_int(spec["units"], where, "spec.units", 1, MAX_UNITS)
    kind = need(spec["input"], str, where, "spec.input")
    if kind not in INPUT_LAYERS:
        raise BadModelFile(f"{where}: field 'spec.input' is {kind[:40]!r}, not one of {sorted(INPUT_LAYERS)}")
    levels = None if spec["levels"] is None else need_int(spec["levels"], where, "spec.levels", 2, MAX_LEVELS)
    options = check_keys(spec["input_options"], where, "spec.input_options", (), INPUT_LAYERS[kind].extras)
    for k, v in options.items():
        if k == "levels" and v != levels:
            raise BadModelFile(f"{where}: field 'spec.input_options.levels' differs from 'spec.levels'")
        if k != "levels":
            need_float(v, where, f"spec.input_options.{k}", 0.0)
    if spec["schema"] is not None:
        schema_of(spec["schema"], where, "spec.schema")
    need_list(spec["columns"], where, "spec.columns", int)
    graph = region_graph(spec["graph"], where)
    size = spec_bytes(graph, units, kind, levels)
    if size > budget:
        raise BadModelFile(f"{where}: field 'spec' describes {size} bytes of parameters (K = {units}), but the "
                           f"arrays hold {budget}; the file was changed")
    return graph


def region_graph(doc, where: str) -> RegionGraph:
    """A region graph document: non-empty sorted regions over 0..n-1 (n: the root's size) and
    partitions of three region indices (``RegionGraph.check`` tests the splits)."""
    name = "spec.graph"
    check_keys(doc, where, name, ("regions", "partitions", "root"))
    regions = need_list(doc["regions"], where, f"{name}.regions", list)
    root = need_int(doc["root"], where, f"{name}.root", 0, len(regions) - 1)
    n = len(regions[root])
    for i, r in enumerate(regions):
        need_list(r, where, f"{name}.regions[{i}]", int)
        if not r or not all(0 <= a < b for a, b in zip(r, r[1:])) or not 0 <= r[0] <= r[-1] < n:
            raise BadModelFile(f"{where}: field '{name}.regions[{i}]' is not a non-empty, sorted list of "
                               f"variables 0..{n - 1}")
    partitions = need_list(doc["partitions"], where, f"{name}.partitions", list)
    for j, p in enumerate(partitions):
        need_list(p, where, f"{name}.partitions[{j}]", int, 3)
        if not all(0 <= x < len(regions) for x in p):
            raise BadModelFile(f"{where}: field '{name}.partitions[{j}]' refers to an unknown region")
    return RegionGraph([tuple(r) for r in regions], [(p[0], p[1], p[2]) for p in partitions], root)


def spec_bytes(graph: RegionGraph, units: int, kind: str, levels: int | None) -> int:
    """Bytes of the float32 parameters a ``DenseCircuit`` of this graph has (as ``arrays``):
    K^3 per partition, K x (most partitions of a region) per region, K root weights, and per
    input pair and unit, 2 (Gaussian), 1 (Bernoulli) or ``levels`` (categorical) numbers."""
    reach = DenseCircuit.reachable(graph)
    per_region = Counter(p for p, _, _ in graph.partitions if p in reach)
    pairs = sum(len(graph.regions[r]) for r in reach if r not in per_region)
    per_pair = INPUT_LAYERS[kind].floats or levels or 0
    floats = (sum(per_region.values()) * units ** 3 + len(reach) * units * max(per_region.values(), default=1)
              + units + pairs * units * per_pair)
    return 4 * floats


FORMATS = {Circuit.format: Format(("format", "schema", "nodes", "meta"), False, node_payload, node_circuit),
           DenseCircuit.format: Format(("format", "spec", "meta"), True, dense_payload, dense_circuit)}

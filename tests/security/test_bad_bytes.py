"""Hostile bytes: fuzzed codec messages and tampered model files.

(a) Thousands of mutations of real encoded messages: every decode returns a ``Message`` or raises
``CodecError``; a client's bad reply is its ``decode`` failure (the run goes on), a bad request
its error reply. (b) Every JSON field of a saved node circuit, dense circuit, FedPC and NGM swapped
for hostile values (checksums left or fixed), array bytes flipped: every load is a ``FedpgmError``
naming the file (or, for a harmless edit with fixed checksums, a model that answers), in bounded
memory; an untouched copy loads and predicts exactly as the model saved.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.numpy import load_file

from fedpgm.circuits.dense_estimator import DensePC
from fedpgm.concepts.models import ConceptModel, load_model as load_concept_model, save_model as save_concept_model
from fedpgm.circuits.estimator import LearnSPN
from fedpgm.circuits.io import spec_bytes
from fedpgm.circuits.learners import load_model
from fedpgm.circuits.region_graph import RegionGraph
from fedpgm.data import load_dataset, partition
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation
from fedpgm.federation import inprocess
from fedpgm.federation.codec import CodecError, Message, decode, encode
from fedpgm.fedpc import FedPC, fit_fedpc
from fedpgm.fedpc.trees import TreeCircuit, fit_fcdt
from fedpgm.model_files import SEAL, file_record, seal
from fedpgm.ngm.model import NGM, NGMSettings

# -- (a) the codec -------------------------------------------------------------------------------
DIAG = "fedpgm.federation.diagnostics:HANDLERS"
DIGITS = b"1" * 4301  # one digit over Python's limit for int(str)
TOKENS = [DIGITS, b"-" + DIGITS, b"1e999", b"-1e400", b"NaN", b"Infinity", b"[" * 100_000 + b"]" * 100_000,
          b'{"a":' * 70 + b"1" + b"}" * 70, b"{}", b"[]", b'"\\ud800"', b'"O"', b'"V8"', b'"|S4"', b'"(2,)f8"',
          b"18446744073709551616", b"-1", b"0.5", b"null", b"true", b'"' + b"x" * 100_000 + b'"', b"[1,2,3]"]
TOKEN = re.compile(rb'-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|"(?:[^"\\]|\\.)*"|true|false|null')


def messages() -> list[bytes]:
    rng = np.random.default_rng(0)
    return [bytes(encode(m)) for m in (
        Message("fit", {"X": rng.normal(size=(6, 3)), "mask": np.array([True, False, True])},
                {"k": 3, "names": ["a", "b"], "nested": {"x": 1.5, "n": None}, "s": "text"}),
        Message("loglik", {"codes": np.arange(10, dtype=np.int32), "scalar": np.array(2.5),
                           "big": np.arange(6, dtype=">i4").reshape(2, 3)}, {"keys": ["c0", "c1"]}),
        Message("empty"))]


def header_end(data: bytes) -> int:
    return 13 + struct.unpack("<Q", data[5:13])[0]


def with_header(data: bytes, text: bytes) -> bytes:
    """``data`` with its header JSON replaced by ``text`` (length fixed, body re-aligned)."""
    end = header_end(data)
    body = data[end + (-end) % 64:]
    head = data[:5] + struct.pack("<Q", len(text)) + text
    return head + bytes((-len(head)) % 64) + body


def at(rng, data: bytes, header_bias: bool) -> int:
    """A random position, in the header half of the time when ``header_bias``."""
    end = min(header_end(data), len(data)) if len(data) >= 13 else len(data)
    return int(rng.integers(0, end if header_bias and end > 0 else len(data)))


def flip(rng, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(int(rng.integers(1, 5))):
        out[at(rng, data, rng.random() < 0.5)] ^= int(rng.integers(1, 256))
    return bytes(out)


def truncate(rng, data: bytes) -> bytes:
    return data[:int(rng.integers(0, len(data)))]


def insert(rng, data: bytes) -> bytes:
    i = at(rng, data, rng.random() < 0.7)
    return data[:i] + rng.integers(0, 256, int(rng.integers(1, 17))).astype(np.uint8).tobytes() + data[i:]


def delete(rng, data: bytes) -> bytes:
    i = at(rng, data, rng.random() < 0.7)
    return data[:i] + data[i + int(rng.integers(1, 17)):]


def header_token(rng, data: bytes) -> bytes:
    """One JSON token of the header (a name, dtype, size, offset or config value) replaced."""
    text = data[13:header_end(data)]
    spots = list(TOKEN.finditer(text))
    m = spots[int(rng.integers(0, len(spots)))]
    token = TOKENS[int(rng.integers(0, len(TOKENS)))]
    return with_header(data, text[:m.start()] + token + text[m.end():])


MUTATORS = {"flip": flip, "truncate": truncate, "insert": insert, "delete": delete, "header token": header_token}


def outcome(data: bytes) -> str:
    try:
        decode(data)
    except CodecError:
        return "CodecError"
    except Exception as e:  # what the test is about: nothing else may escape
        return type(e).__name__
    return "Message"


def test_fuzzed_messages_decode_or_raise_codec_error_only():
    rng = np.random.default_rng(1)
    good = messages()
    counts: Counter = Counter()
    slowest = 0.0
    start = time.perf_counter()
    for i in range(20_000):
        name = list(MUTATORS)[i % len(MUTATORS)]
        data = MUTATORS[name](rng, good[i % len(good)])
        t = time.perf_counter()
        counts[name, outcome(data)] += 1
        slowest = max(slowest, time.perf_counter() - t)
    total = time.perf_counter() - start
    print(dict(counts), f"slowest decode {slowest * 1e3:.1f} ms, all {total:.1f} s")
    assert {kind for _, kind in counts} == {"Message", "CodecError"}
    assert sum(counts.values()) == 20_000
    assert counts["header token", "CodecError"] > 2000 and counts["flip", "Message"] > 100
    assert slowest < 5.0 and total < 60  # a sanity deadline, not a benchmark


@pytest.mark.parametrize("token", TOKENS[:8], ids=["4301 digits", "-4301 digits", "1e999", "-1e400", "NaN",
                                                    "Infinity", "1e5 deep", "70 deep config"])
def test_every_header_field_with_a_hostile_token_is_a_codec_error(token):
    good = messages()[0]
    text = good[13:header_end(good)]
    spots = list(TOKEN.finditer(text))
    for m in spots:  # every token of the header: the name, each config value, dtype, shape, offset, size
        with pytest.raises(CodecError):
            decode(with_header(good, text[:m.start()] + token + text[m.end():]))
    assert len(spots) >= 25


@pytest.fixture(scope="module")
def parts():
    ds = load_dataset("synthetic:mixed", rows=300, seed=0)
    return partition(ds, "horizontal", 3, seed=0)


def test_a_client_replying_bad_bytes_is_its_decode_failure_and_the_run_goes_on(parts, monkeypatch):
    real = inprocess.serve_one
    good = bytes(encode(Message("echo", {}, {"client": "client-1", "n": 1})))
    bad = with_header(good, good[13:header_end(good)].replace(b'"n":1', b'"n":' + DIGITS))

    def hostile(handlers, ctx, request):
        return (inprocess.OK, bad) if ctx.client_id == "client-1" else real(handlers, ctx, request)

    with InProcessFederation(parts, DIAG, mode="sequential") as fed:
        monkeypatch.setattr(inprocess, "serve_one", hostile)
        r = fed.broadcast("echo", {"x": np.arange(3.0)})
        assert sorted(r.messages) == ["client-0", "client-2"]
        f = r.failures["client-1"]
        assert f.kind == "decode" and "corrupt message header" in f.detail
        assert "client-1" not in fed.lost  # not lost: asked again next round
        monkeypatch.setattr(inprocess, "serve_one", real)
        again = fed.broadcast("echo", {"x": np.arange(3.0)})
        assert sorted(again.messages) == ["client-0", "client-1", "client-2"] and not again.failures


def test_a_bad_request_is_the_clients_error_reply_in_valid_utf8(parts):
    with InProcessFederation(parts, DIAG, mode="sequential") as fed:
        handlers, ctx = fed.handlers, fed.contexts["client-0"]
        good = bytes(encode(Message("echo", {"x": np.arange(3.0)})))
        status, payload = inprocess.serve_one(handlers, ctx, good)
        assert status == inprocess.OK and decode(payload).config == {"client": "client-0"}
        rng = np.random.default_rng(2)
        replies = Counter()
        for i in range(300):
            data = MUTATORS[list(MUTATORS)[i % len(MUTATORS)]](rng, good)
            status, payload = inprocess.serve_one(handlers, ctx, data)
            text = bytes(payload).decode() if status == inprocess.FAILED else None
            replies["ok" if text is None else text.split(":")[0]] += 1
        surrogate = with_header(good, good[13:header_end(good)].replace(b'"echo"', b'"\\ud800"'))
        status, payload = inprocess.serve_one(handlers, ctx, surrogate)
        assert status == inprocess.FAILED and "\\ud800" in bytes(payload).decode("utf-8")
    print(dict(replies))
    assert replies["CodecError"] > 100 and set(replies) <= {"ok", "CodecError", "FedpgmError", "ContractError"}


# -- (b) model files -------------------------------------------------------------------------------
NGM_SCHEMA = Schema((Feature("a", "continuous"), Feature("b", "continuous"), Feature("k", "categorical", ("lo", "hi"))))
DROP = object()  # the mutation that removes a field
# the fields whose edit (with the checksums fixed) may load: reports, training settings, names,
# statistics, the meta of a valid estimator; never a structure, size, graph, plan or record
HARMLESS = re.compile(r"^[^:]+:(meta|info|settings|edges|residuals|layout\.stats|plan\.components\.\*\.key|"
                      r"spec\.input_options|experts\.\*\.(weight|min_samples_leaf)|"
                      r"(layout\.|spec\.)?schema\.(label|features\.\*\.categories))(\.|$)")
MAX_QUERIES = 15  # accepted edits queried per model (a FedPC query compiles its circuit: 0.2 s)
HOSTILE = [[], {}, "os.system", 10 ** 30, -1, None, True, 0.5, DROP]
# documents (inner first: an outer one records the inner) and the array file each records, by model
DOCS = {"node": {"structure.json": ("params", "params.safetensors")},
        "dense": {"structure.json": ("params", "params.safetensors")},
        "fedpc": {"circuit/structure.json": ("params", "circuit/params.safetensors"), "fedpc.json": ("files", None)},
        "ngm": {"model.json": ("weights", "weights.safetensors")},
        "fcm": {"model.json": ("weights", "weights.safetensors")},
        "fcdt": {"trees.json": ("arrays", "trees.npz")}}


def ngm_frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    b = 0.8 * a + rng.normal(0, 0.5, n)
    return pd.DataFrame({"a": a, "b": b, "k": (b + rng.normal(0, 0.3, n) > 0).astype(float)})


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{model: (folder, load, query)}: four small models saved, their loader and a query."""
    root = tmp_path_factory.mktemp("models")
    ds = load_dataset("synthetic:mixed", rows=400, seed=0)
    X = ds.test.iloc[:40]
    cont = [f.name for f in ds.schema.features if f.kind == "continuous"]
    LearnSPN(seed=0).fit(ds.train, schema=ds.schema).save(root / "node")
    DensePC(structure="binary-trees", units=2, depth=1, repetitions=2, epochs=1, device="cpu").fit(
        ds.train[cont], schema=Schema(tuple(Feature(n, "continuous") for n in cont))).save(root / "dense")
    with InProcessFederation(partition(ds, "horizontal", 2, seed=0), "fedpgm.fedpc.client:HANDLERS",
                             mode="sequential") as fed:
        fit_fedpc(fed, clusters=2, seed=0).save(root / "fedpc")
    NGM.fit(ngm_frame(300, 0), NGM_SCHEMA, nx.Graph([("a", "b"), ("b", "k")]),
            NGMSettings(hidden=8, epochs=3, seed=0)).save(root / "ngm")
    test = ngm_frame(40, 1)
    with InProcessFederation(partition(ds, "horizontal", 2, seed=0), "fedpgm.fedpc.client:HANDLERS",
                             mode="sequential") as fed:
        fit_fcdt(fed, trees=2).save(root / "fcdt")
    cards = {"a": 2, "b": 2, "c": 2, "d": 3, "e": 2, "f": 3, "g": 2, "h": 2, "i": 2, "j": 4, "y": 2}
    graph = nx.DiGraph([("a", "c"), ("b", "c"), ("c", "y"), ("d", "y"), ("e", "f"), ("f", "y"), ("g", "y"),
                        ("h", "g"), ("i", "j"), ("j", "y")])
    save_concept_model(ConceptModel("cgm", 6, cards, graph, "y", hidden=4, emb=2), root / "fcm",
                       meta={"network": "synthetic", "rounds": 3, "clients": ["c0", "c1", "c2"], "task_accuracy": 0.9,
                             "settings": {"lr": 1e-3, "epochs": 1, "batch_size": 64, "hidden": 4, "emb": 2}})
    inputs = torch.from_numpy(np.random.default_rng(2).normal(size=(20, 6)).astype(np.float32))

    def concept_logits(loaded) -> np.ndarray:
        model, _ = loaded
        with torch.no_grad():
            return np.concatenate([v.numpy() for v in model(inputs).values()], axis=1)
    return {"node": (root / "node", load_model, lambda m: m.log_likelihood(X)),
            "dense": (root / "dense", load_model, lambda m: m.log_likelihood(X[cont])),
            "fedpc": (root / "fedpc", FedPC.load, lambda m: m.log_likelihood(X)),
            "ngm": (root / "ngm", NGM.load, lambda m: m.predict(test, "k")),
            "fcdt": (root / "fcdt", TreeCircuit.load, lambda m: m.predict_proba(X)),
            "fcm": (root / "fcm", load_concept_model, concept_logits)}


def paths(value, prefix=()):
    """Every field of a JSON value (of a list, its first and last items)."""
    yield prefix
    items = value.items() if isinstance(value, dict) else (
        [(i, value[i]) for i in sorted({0, len(value) - 1})] if isinstance(value, list) and value else [])
    for k, v in items:
        yield from paths(v, prefix + (k,))


def edited(text: str, path: tuple, value):
    doc = json.loads(text)
    if not path:
        if value is DROP:
            raise KeyError("the document itself")
        return value
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if value is DROP:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def reseal(folder: Path, model: str, keep: tuple[str, str] | None = None) -> None:
    """What a deliberate editor does: fix every record and checksum (except field ``keep``)."""
    for name, (key, arrays) in DOCS[model].items():
        doc = json.loads((folder / name).read_text())
        if not isinstance(doc, dict):
            continue
        if (name, key) != keep and arrays is not None:
            doc[key] = file_record(folder / arrays)
        if (name, key) != keep and key == "files" and isinstance(doc.get("files"), dict):
            doc["files"] = {n: file_record(folder / n) for n in doc["files"] if (folder / n).is_file()}
        if (name, SEAL) != keep:
            doc.pop(SEAL, None)
            doc = seal(doc)
        (folder / name).write_text(json.dumps(doc))


def attempt(load, query, folder: Path) -> str:
    """'answered' (or 'loaded' without a ``query``), or the type of what loading raised ('query:
    ...' for what the query raised: a model whose edited schema lacks the query's columns)."""
    try:
        model = load(folder)
    except FedpgmError as e:
        assert "\n" not in str(e) and str(folder) in str(e), f"unclear error: {e}"
        return type(e).__name__
    except Exception as e:  # what the test is about: nothing else may escape
        return f"ESCAPED {type(e).__name__}: {str(e)[:300]}"
    if query is None:
        return "loaded"
    try:
        out = query(model)
    except FedpgmError as e:
        return f"query: {type(e).__name__}"
    except Exception as e:
        return f"ESCAPED query {type(e).__name__}: {str(e)[:300]}"
    assert np.isfinite(np.asarray(out, dtype=float)).all()
    return "answered"


def test_untouched_copies_load_and_answer_exactly_as_saved(saved, tmp_path):
    for model, (folder, load, query) in saved.items():
        copy = tmp_path / model
        shutil.copytree(folder, copy)
        np.testing.assert_array_equal(query(load(copy)), query(load(folder)))
        assert np.isfinite(query(load(copy))).all()
    spec = json.loads((saved["dense"][0] / "structure.json").read_text())["spec"]  # the size bound is exact
    arrays = load_file(str(saved["dense"][0] / "params.safetensors"))
    graph = RegionGraph.from_dict(spec["graph"])
    assert spec_bytes(graph, spec["units"], spec["input"], spec["levels"]) == sum(a.nbytes for a in arrays.values())


def mutations(text: str, per_field: int = 3):
    """(field, edited document) for every field of ``text`` and ``per_field`` hostile values
    (taken in turn, so every value meets fields at every depth) that change it."""
    original = json.dumps(json.loads(text), sort_keys=True)
    for i, path in enumerate(paths(json.loads(text))):
        for value in (HOSTILE[(i + j) % len(HOSTILE)] for j in range(per_field)):
            try:
                doc = edited(text, path, value)
            except KeyError:  # (the document itself cannot be dropped)
                continue
            if json.dumps(doc, sort_keys=True) != original:
                yield path, doc


@pytest.mark.parametrize("model", sorted(DOCS))
def test_every_json_field_swapped_is_refused_or_harmless(saved, tmp_path, model):
    """Each mutation twice: as is (the checksums then differ: always refused) and with every
    record and checksum fixed by the editor (refused by the field checks, or a harmless edit:
    the model loads and answers finite numbers)."""
    folder, load, query = saved[model]
    work = tmp_path / "m"
    shutil.copytree(folder, work)
    texts = {name: (work / name).read_text() for name in DOCS[model]}
    counts: Counter = Counter()
    accepted: set[str] = set()
    for name, text in texts.items():
        for k, (path, doc) in enumerate(mutations(text)):
            for sealed in (False, True) if k % 4 == 0 else (True,):  # (unsealed: a sample suffices)
                for n, t in texts.items():
                    (work / n).write_text(t)
                (work / name).write_text(json.dumps(doc))
                if sealed:
                    reseal(work, model, (name, path[0]) if path else None)
                asked = counts[True, "answered"] + counts[True, "query: FedpgmError"]
                got = attempt(load, query if asked < MAX_QUERIES else None, work)
                counts[sealed, got] += 1
                if got in ("answered", "loaded"):
                    accepted.add(f"{name}:" + ".".join("*" if isinstance(k, int) else k for k in path))
    print(model, dict(counts), sorted(accepted))
    escaped = [k for k in counts if k[1].startswith("ESCAPED")]
    assert not escaped, "\n".join(map(str, escaped))
    unsealed = sum(v for k, v in counts.items() if not k[0])
    assert unsealed >= 30 and counts[False, "answered"] + counts[False, "loaded"] == 0  # all refused
    assert all(HARMLESS.match(field) for field in accepted), sorted(f for f in accepted if not HARMLESS.match(f))
    assert sum(v for k, v in counts.items() if k[0] and k[1] in ("BadModelFile", "FedpgmError")) >= 100


def tampered(saved, tmp_path, model: str, name: str, path: tuple, value, fix: bool = True) -> Path:
    """A copy of ``model`` with field ``path`` of document ``name`` set to ``value`` (and, with
    ``fix``, every record and checksum fixed again, as a deliberate editor would)."""
    work = tmp_path / f"{model}-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(saved[model][0], work)
    (work / name).write_text(json.dumps(edited((work / name).read_text(), path, value)))
    if fix:
        reseal(work, model, (name, path[0]))
    return work


RED_TEAM = {  # the findings: (model, document, field, value, checksums fixed, what the error names)
    "meta a list": ("node", "structure.json", ("meta",), [], True, "field 'meta' must be an object"),
    "meta.estimator os.system": ("node", "structure.json", ("meta", "estimator"), "os.system", True,
                                 "field 'meta.estimator' is 'os.system'"),
    "unknown meta.params": ("node", "structure.json", ("meta", "params", "os.system"), 1, True, "meta.params"),
    "mistyped meta.params": ("node", "structure.json", ("meta", "params", "seed"), "0", True, "meta.params"),
    "meta.params short of one": ("node", "structure.json", ("meta", "params", "seed"), DROP, True, "lacks ['seed']"),
    "dense meta.params mistyped": ("dense", "structure.json", ("meta", "params", "units"), [10], True, "meta.params"),
    "dense units 10**6": ("dense", "structure.json", ("spec", "units"), 10 ** 6, True, "field 'spec.units'"),
    "dense units 2**16": ("dense", "structure.json", ("spec", "units"), 2 ** 16, True, "bytes of parameters"),
    "dense units as text": ("dense", "structure.json", ("spec", "units"), "2", True, "field 'spec.units' must be int"),
    "dense region of 10**6 variables": ("dense", "structure.json", ("spec", "graph", "regions", 0), [10 ** 6], True,
                                        "spec.graph.regions[0]"),
    "plan.subspaces a string": ("fedpc", "fedpc.json", ("plan", "subspaces"), "abc", True, "plan.subspaces"),
    "fedpc.json without its checksum": ("fedpc", "fedpc.json", (SEAL,), DROP, False, SEAL),
    "fedpc.json edited, checksum kept": ("fedpc", "fedpc.json", ("info", "glue"), "edited", False, SEAL),
    "fedpc.json without file records": ("fedpc", "fedpc.json", ("files",), DROP, True, "field 'files'"),
    "fedpc components 10**9": ("fedpc", "fedpc.json", ("components",), 10 ** 9, True, "field 'components'"),
    "ngm meta a list": ("ngm", "model.json", ("meta",), [], True, "field 'meta' must be an object"),
    "ngm widths as text": ("ngm", "model.json", ("widths",), "12", True, "field 'widths' must be list"),
    "ngm settings mistyped": ("ngm", "model.json", ("settings", "hidden"), "8", True, "settings.hidden"),
    "fcm spec hidden 2**20": ("fcm", "model.json", ("spec", "hidden"), 2 ** 20, True, "field 'spec' 'hidden'"),
    "fcm edge to an unlisted node": ("fcm", "model.json", ("spec", "edges", 0), ["c", "zz"], True, "edges join nodes"),
    "fcm meta a list": ("fcm", "model.json", ("meta",), [], True, "field 'meta' must be"),
    "fcdt edited, checksum kept": ("fcdt", "trees.json", ("combine",), "product", False, SEAL),
    "ngm estimator params unknown": ("ngm", "model.json", ("meta",), {"estimator": {"os.system": 1}}, True,
                                     "meta.estimator"),
}


@pytest.mark.parametrize("case", sorted(RED_TEAM))
def test_the_red_teams_files_are_refused_naming_file_and_field(saved, tmp_path, case):
    model, name, path, value, fix, text = RED_TEAM[case]
    work = tampered(saved, tmp_path, model, name, path, value, fix)
    with pytest.raises(FedpgmError) as err:
        saved[model][1](work)
    assert text in str(err.value) and str(work) in str(err.value) and "\n" not in str(err.value)


ARRAYS = {"node": "params.safetensors", "dense": "params.safetensors", "fedpc": "circuit/params.safetensors",
          "ngm": "weights.safetensors", "fcm": "weights.safetensors", "fcdt": "trees.npz"}


@pytest.mark.parametrize("model", sorted(ARRAYS))
def test_flipped_array_bytes_are_refused_or_load_finite(saved, tmp_path, model):
    folder, load, query = saved[model]
    work = tmp_path / "m"
    shutil.copytree(folder, work)
    original = {n: (work / n).read_bytes() for n in [ARRAYS[model], *DOCS[model]]}
    size = len(original[ARRAYS[model]])
    counts: Counter = Counter()
    rng = np.random.default_rng(3)
    for position in [*range(0, min(size, 120), 10), *rng.integers(0, size, 12)]:
        for fix in (False, True):
            for n, data in original.items():
                (work / n).write_bytes(data)
            data = bytearray(original[ARRAYS[model]])
            data[int(position)] ^= 0xA5
            (work / ARRAYS[model]).write_bytes(bytes(data))
            if fix:
                reseal(work, model)
            counts[fix, attempt(load, query, work)] += 1
    print(model, dict(counts))
    assert not [k for k in counts if k[1].startswith("ESCAPED")], counts
    assert counts[False, "FedpgmError"] == sum(v for k, v in counts.items() if not k[0])  # the SHA-256 refuses
    assert counts[True, "FedpgmError"] >= 8  # the header bytes: a broken safetensors file, refused


LOAD_IN_CHILD = """
import json, resource, sys
from fedpgm.circuits.learners import load_model
from fedpgm.circuits.region_graph import RegionGraph
from fedpgm.errors import FedpgmError
from fedpgm.fedpc import FedPC
from fedpgm.ngm.model import NGM
from fedpgm.concepts.models import load_model as load_concept_model
LOAD = {"node": load_model, "dense": load_model, "fedpc": FedPC.load, "ngm": NGM.load, "fcm": load_concept_model}
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # (the libraries' own peak, before any model)
out = []
for model, folder in json.loads(sys.stdin.read()):
    try:
        LOAD[model](folder)
        out.append("loaded")
    except FedpgmError as e:
        out.append(type(e).__name__ + ": " + str(e)[:120])
    except BaseException as e:
        out.append("ESCAPED " + type(e).__name__ + ": " + str(e)[:200])
print(json.dumps({"outcomes": out, "base_kib": base, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def grown(saved, tmp_path, model: str, name: str) -> Path:
    """A copy whose document ``name`` claims 1 GiB (a sparse file: nothing is written)."""
    work = tmp_path / f"{model}-grown-{name.replace('/', '-')}"
    shutil.copytree(saved[model][0], work)
    with open(work / name, "r+b") as f:
        f.truncate(2 ** 30)
    return work


def test_size_attacks_are_refused_before_allocating(saved, tmp_path):
    """Documents that describe huge models (or are huge), loaded in a fresh process: each is
    refused, and the process's peak resident memory (``getrusage``) grows by less than 512 MiB over
    the peak its imports reached."""
    dense_graph = json.loads((saved["dense"][0] / "structure.json").read_text())["spec"]["graph"]
    cases = [
        ("dense", tampered(saved, tmp_path, "dense", "structure.json", ("spec", "units"), 2 ** 16)),
        ("dense", tampered(saved, tmp_path, "dense", "structure.json", ("spec", "input_options"), {"levels": 2 ** 16})),
        ("dense", tampered(saved, tmp_path, "dense", "structure.json", ("spec", "graph", "partitions"),
                           dense_graph["partitions"] * 1000)),
        ("node", tampered(saved, tmp_path, "node", "structure.json", ("nodes", 0, "shapes", "mean"), [2 ** 40])),
        ("node", tampered(saved, tmp_path, "node", "structure.json", ("nodes", 0, "shapes", "mean"), [2 ** 20] * 8)),
        ("ngm", tampered(saved, tmp_path, "ngm", "model.json", ("widths",), [4, 2 ** 20, 2 ** 20, 4])),
        ("fedpc", tampered(saved, tmp_path, "fedpc", "fedpc.json", ("components",), 10 ** 9)),
        ("fedpc", grown(saved, tmp_path, "fedpc", "fedpc.json")),
        ("node", grown(saved, tmp_path, "node", "structure.json")),
        ("ngm", grown(saved, tmp_path, "ngm", "model.json")),
        ("fcm", tampered(saved, tmp_path, "fcm", "model.json", ("spec", "hidden"), 2 ** 20)),
        ("fcm", tampered(saved, tmp_path, "fcm", "model.json", ("spec", "input_dim"), 10 ** 9)),
    ]
    child = subprocess.run([sys.executable, "-c", LOAD_IN_CHILD], input=json.dumps([(m, str(f)) for m, f in cases]),
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    report = json.loads(child.stdout.strip().splitlines()[-1])
    print(report)
    assert all(o.startswith(("BadModelFile", "FedpgmError")) for o in report["outcomes"]), report["outcomes"]
    extra = report["peak_kib"] - report["base_kib"]  # what loading the files added to the imports' peak
    assert extra < 2 ** 19, f"peak RSS grew by {extra / 2 ** 10:.0f} MiB while loading"

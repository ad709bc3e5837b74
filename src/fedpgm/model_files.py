"""Reading model files a user hands us, as untrusted input: bounded JSON and checked array files.

Every model folder is a JSON document plus an array file (safetensors or npz; never pickle). The
JSON records the array file's size and SHA-256 (``file_record``); a loader checks both
(``check_file``) before it parses a byte of the arrays, so an edited, swapped or padded file is
refused at once and a file grown by a huge extra tensor is never read into memory. JSON is read
with ``read_json``: at most ``MAX_JSON_BYTES`` (checked before reading), NaN/Infinity and
overflowing numbers refused, nesting bounded, any parse failure one ``FedpgmError``.

A model document also carries the SHA-256 of its own canonical JSON (``seal``, checked by
``check_seal``), so every field, not only the arrays, is covered by the integrity record. The
seal is a checksum, not a signature (anyone can recompute it): it catches corrupted and edited
files, while each loader's field checks (``need``, ``check_keys``, ``check_schema_doc``) are what
bound every allocation, and run first so that a refused field is named.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from fedpgm.errors import FedpgmError

MAX_JSON_DEPTH = 64
MAX_JSON_BYTES = 64 * 2 ** 20
CHUNK = 1 << 20
SEAL = "document_sha256"  # the key of a document's own checksum


class BadModelFile(FedpgmError):
    """A model file with a missing, mistyped, out-of-range or inconsistent field."""


def json_depth(value, limit: int) -> int:
    """Nesting depth of a JSON value, measured without recursion; stops counting past ``limit``."""
    stack, deepest = [(value, 1)], 0
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def refuse_constant(name: str):
    raise ValueError(f"{name} is not allowed")


def finite_float(text: str) -> float:
    """``json``'s float parser, refusing numbers that overflow to infinity (``1e999``)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def parse_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH):
    """A JSON value; ``ValueError`` for anything malformed (``json`` itself may also raise
    ``RecursionError`` or, for a 4,301-digit integer, a plain ``ValueError``)."""
    try:
        doc = json.loads(text, parse_constant=refuse_constant, parse_float=finite_float)
    except RecursionError:
        raise ValueError(f"nested deeper than {max_depth} levels") from None
    if json_depth(doc, max_depth) > max_depth:
        raise ValueError(f"nested deeper than {max_depth} levels")
    return doc


def read_json(path: Path, max_depth: int = MAX_JSON_DEPTH, max_bytes: int = MAX_JSON_BYTES):
    """The JSON document at ``path``; a ``FedpgmError`` naming the file for anything malformed."""
    size = Path(path).stat().st_size
    if size > max_bytes:
        raise BadModelFile(f"{path} has {size} bytes, more than the {max_bytes} a fedpgm model "
                           "document may have; it was not written by fedpgm")
    try:
        return parse_json(Path(path).read_bytes().decode("utf-8"), max_depth)
    except (ValueError, MemoryError) as e:  # (UnicodeDecodeError and JSONDecodeError included)
        raise FedpgmError(f"{path} is not valid JSON ({str(e)[:200]})") from None


def digest(doc) -> str:
    """SHA-256 of a JSON value's canonical text (sorted keys, no spaces)."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def seal(doc: dict) -> dict:
    """``doc`` as it will read back (through JSON), with its own checksum under ``SEAL``."""
    plain = json.loads(json.dumps(doc))
    return {**plain, SEAL: digest(plain)}


def check_seal(doc: dict, where: str) -> None:
    """Refuse a document whose ``SEAL`` is missing or does not match its other fields."""
    recorded = doc.get(SEAL)
    if not isinstance(recorded, str):
        raise BadModelFile(f"{where}: field '{SEAL}' is missing (written by an older fedpgm, or edited); "
                           "fit the model again")
    if digest({k: v for k, v in doc.items() if k != SEAL}) != recorded:
        raise BadModelFile(f"{where}: the document does not match its '{SEAL}'; the file was changed")


def kind_of(value) -> str:
    return "a huge integer" if isinstance(value, int) and abs(value) > 2 ** 63 else type(value).__name__


def need(value, kind, where: str, name: str, what: str = ""):
    """``value`` if it is a ``kind`` (bool is no int, int is a float), else a ``BadModelFile``
    naming the field."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        want = what or " or ".join(k.__name__ for k in kinds)
        raise BadModelFile(f"{where}: field '{name}' must be {want}, got {kind_of(value)}")
    return value


def need_int(value, where: str, name: str, low: int = 0, high: int = 2 ** 62) -> int:
    """An integer in [low, high]."""
    need(value, int, where, name)
    if not low <= value <= high:
        raise BadModelFile(f"{where}: field '{name}' must be in {low}..{high}, got {str(value)[:40]}")
    return value


def need_float(value, where: str, name: str, low: float = -math.inf, high: float = math.inf) -> float:
    """A finite number in [low, high], as a float."""
    need(value, float, where, name, "a number")
    try:
        x = float(value)
    except OverflowError:
        x = math.inf
    if not (math.isfinite(x) and low <= x <= high):
        raise BadModelFile(f"{where}: field '{name}' must be a finite number in [{low}, {high}], "
                           f"got {str(value)[:40]}")
    return x


def need_list(value, where: str, name: str, kind=None, length: int | None = None) -> list:
    """A list (of ``kind`` items, of ``length`` items if given)."""
    need(value, list, where, name)
    if length is not None and len(value) != length:
        raise BadModelFile(f"{where}: field '{name}' must hold {length} items, holds {len(value)}")
    if kind is not None:
        for i, item in enumerate(value):
            need(item, kind, where, f"{name}[{i}]")
    return value


def check_keys(doc, where: str, name: str, required, optional=()) -> dict:
    """``doc`` is a dict holding every ``required`` key and no key outside ``optional``."""
    need(doc, dict, where, name, "an object")
    missing = sorted(set(required) - set(doc))
    extra = sorted(set(doc) - set(required) - set(optional))
    if missing or extra:
        what = f"lacks {missing}" if missing else f"has unknown key(s) {[str(k)[:40] for k in extra[:5]]}"
        raise BadModelFile(f"{where}: field '{name}' {what}")
    return doc


def check_schema_doc(doc, where: str, name: str = "schema") -> None:
    """The JSON types of a ``Schema.to_dict`` document (``Schema.from_dict`` checks the rest)."""
    check_keys(doc, where, name, ("features",), ("label", "pixel_levels"))
    for i, f in enumerate(need_list(doc["features"], where, f"{name}.features")):
        check_keys(f, where, f"{name}.features[{i}]", ("name", "type"), ("categories",))
        need(f["name"], str, where, f"{name}.features[{i}].name")
        need(f["type"], str, where, f"{name}.features[{i}].type")
        if f.get("categories") is not None:
            need_list(f["categories"], where, f"{name}.features[{i}].categories", (str, int, float))
    if doc.get("label") is not None:
        need(doc["label"], str, where, f"{name}.label")
    if doc.get("pixel_levels") is not None:
        need_int(doc["pixel_levels"], where, f"{name}.pixel_levels", 2, 2 ** 16)


def schema_of(doc, where: str, name: str = "schema"):
    """The ``Schema`` of a checked schema document; its errors name the file and field."""
    from fedpgm.data.schema import Schema

    check_schema_doc(doc, where, name)
    try:
        return Schema.from_dict(doc)
    except FedpgmError as e:
        raise BadModelFile(f"{where}: field '{name}': {e}") from None


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def file_record(path: Path) -> dict:
    """What a model's JSON stores about its array file: its size and SHA-256."""
    return {"bytes": Path(path).stat().st_size, "sha256": file_digest(path)}


def check_file(path: Path, record, where: str) -> None:
    """Refuse ``path`` unless its size and SHA-256 equal ``record`` (checked in that order, so a
    file of the wrong size is never read)."""
    if not isinstance(record, dict) or not isinstance(record.get("bytes"), int) \
            or not isinstance(record.get("sha256"), str):
        raise FedpgmError(f"{where}: no integrity record for {Path(path).name} (written by an older "
                          "fedpgm, or edited); fit the model again")
    if not Path(path).is_file():
        raise FedpgmError(f"{where}: {Path(path).name} is missing; the folder is incomplete")
    size = Path(path).stat().st_size
    if size != record["bytes"]:
        raise FedpgmError(f"{where}: {Path(path).name} has {size} bytes, the model records "
                          f"{record['bytes']}; the file was changed or replaced")
    if file_digest(path) != record["sha256"]:
        raise FedpgmError(f"{where}: {Path(path).name} does not match the SHA-256 the model records; "
                          "the file was changed or replaced")


def check_finite(arrays: dict, where: str) -> None:
    """Refuse arrays holding NaN or infinity (a model with them answers NaN)."""
    import numpy as np

    bad = sorted(k for k, v in arrays.items()
                 if np.asarray(v).dtype.kind in "fc" and not np.isfinite(v).all())
    if bad:
        raise FedpgmError(f"{where}: array(s) {bad[:5]} hold NaN or infinite values; the file was "
                          "changed or the model diverged; fit it again")

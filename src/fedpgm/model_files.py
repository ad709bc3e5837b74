"""Reading model files a user hands us, as untrusted input: bounded JSON and checked array files.

Every model folder is a JSON document plus an array file (safetensors or npz; never pickle). The
JSON records the array file's size and SHA-256 (``file_record``); a loader checks both
(``check_file``) before it parses a byte of the arrays, so an edited, swapped or padded file is
refused at once and a file grown by a huge extra tensor is never read into memory. JSON is read
with ``read_json``: NaN/Infinity refused, nesting bounded, any parse failure one ``FedpgmError``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from fedpgm.errors import FedpgmError

MAX_JSON_DEPTH = 64
CHUNK = 1 << 20


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


def read_json(path: Path, max_depth: int = MAX_JSON_DEPTH):
    """The JSON document at ``path``; a ``FedpgmError`` naming the file for anything malformed."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=refuse_constant)
    except (ValueError, UnicodeDecodeError) as e:
        raise FedpgmError(f"{path} is not valid JSON ({e})") from None
    except RecursionError:
        doc = None
    if doc is None or json_depth(doc, max_depth) > max_depth:
        raise FedpgmError(f"{path} is nested deeper than {max_depth} levels; it was not written by fedpgm")
    return doc


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

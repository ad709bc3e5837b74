"""FedTree (PyPI ``fedtree==1.0.5``): federated gradient-boosted trees, the FedPC paper's tree peer.

An optional benchmark extra: ``bash scripts/install_peers.sh`` installs it into the venv and
unpacks the two Debian libraries its prebuilt ``libFedTree.so`` links against (NTL and gf2x:
``libntl44``, ``libgf2x3``) into ``.venv/peer-libs``, which ``load_fedtree`` preloads (so no
``LD_LIBRARY_PATH`` is needed).

FedTree simulates its parties in one process: ``fit`` takes the pooled table and splits it
itself (rows iid for ``horizontal``, column blocks for ``vertical``; hybrid federations are not
supported). With no privacy technique and server-side histogram merging both modes are lossless
histogram GBDT, so the model does not depend on which rows or columns a party holds; our own
partition of the same split is therefore not passed to it. Two known bugs are handled here: its
``predict()`` returns class 0 on binary tasks (we threshold ``predict_proba``), and dense input
goes through a sparse matrix that reads exact zeros as missing (category codes are shifted by
one so a real category is never read as missing).
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError

MODES = ("horizontal", "vertical")


def peer_libs() -> Path:
    """Where ``scripts/install_peers.sh`` unpacked NTL and gf2x (``FEDPGM_PEER_LIBS`` overrides)."""
    default = Path(__file__).resolve().parents[3] / ".venv" / "peer-libs" / "usr" / "lib" / "x86_64-linux-gnu"
    return Path(os.environ.get("FEDPGM_PEER_LIBS", default))


def load_fedtree():
    """The ``fedtree.FLClassifier`` class, with its native dependencies preloaded."""
    libs = peer_libs()
    for name in ("libgf2x.so.3", "libntl.so.44"):
        if (libs / name).exists():
            ctypes.CDLL(str(libs / name), mode=ctypes.RTLD_GLOBAL)
    try:
        from fedtree import FLClassifier
    except (ImportError, OSError) as err:
        raise FedpgmError(f"FedTree is not usable ({err}); run `bash scripts/install_peers.sh`") from err
    return FLClassifier


def fedtree_available() -> bool:
    try:
        load_fedtree()
    except FedpgmError:
        return False
    return True


def matrix(frame: pd.DataFrame, schema: Schema) -> np.ndarray:
    """(rows, inputs) float64 matrix of the non-label columns, category codes shifted by one."""
    cols = [n for n in schema.names if n != schema.label]
    X = frame[cols].to_numpy(dtype=float)
    for j, name in enumerate(cols):
        if schema[name].discrete:
            X[:, j] += 1.0
    if np.isnan(X).any():
        raise FedpgmError("FedTree needs complete rows; load the dataset with missing='impute'")
    return np.ascontiguousarray(X)


def fedtree_proba(train: pd.DataFrame, test: pd.DataFrame, schema: Schema, mode: str, parties: int,
                  seed: int = 0) -> tuple[np.ndarray, float]:
    """FedTree with ``parties`` parties in ``mode`` on a binary label; returns ((rows, 2) test
    probabilities, training wall seconds)."""
    if mode not in MODES:
        raise FedpgmError(f"FedTree supports {MODES}, not '{mode}'")
    if schema.label is None or schema[schema.label].cardinality != 2:
        raise FedpgmError("FedTree's binary:logistic objective needs a binary label")
    FLClassifier = load_fedtree()
    model = FLClassifier(n_parties=parties, mode=mode, partition_mode=mode, seed=seed + 1,
                         objective="binary:logistic", verbose=0)
    t0 = time.perf_counter()
    model.fit(matrix(train, schema), train[schema.label].to_numpy(dtype=float))
    seconds = time.perf_counter() - t0
    p = np.asarray(model.predict_proba(matrix(test, schema)), dtype=float)
    return p, seconds

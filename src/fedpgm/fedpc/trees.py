"""FC[DT]: a federated circuit whose leaves are decision trees, joined at one root.

The FedPC paper notes that federated circuits are not restricted to probabilistic leaves:
"parameterizing leaves by decision trees and introducing a node that performs averaging yields a
bagging model" (its FC[DT] rows of Table 7). Here every client that holds the label fits
scikit-learn ``DecisionTreeClassifier``s on its own columns and rows (horizontal: all columns,
its rows; vertical/hybrid: its columns, with the label shared to it), once: one tree on all its
rows, or with ``trees`` = B > 1, B trees on bootstrap resamples of its rows, averaged into the
client's expert (bagging inside the client; adult, horizontal x5, seed 0: one tree 0.853 /
0.784 accuracy / macro-F1, 10 bootstrap trees 0.860 / 0.790). The root follows
FedPC's semantics: over clients that hold the same columns it averages the trees' class
probabilities weighted by row counts (a sum node, the paper's bagging, of deep trees: at least
5 rows per leaf); over clients whose columns are disjoint (vertical) it multiplies them as
experts on separate evidence, p(y | x) proportional to prod_k p_k(y | x_k) / p(y)^(K-1) (a
product node; exact when the column blocks are independent given y). A product multiplies the
experts' errors instead of averaging them out, so there each client picks its leaf size by
5-fold cross-validated log-loss (calibrated leaves). ``combine`` and ``min_samples_leaf``
override both choices. Measured on Adult (seed 0, vertical x2): mean root with leaves of 5:
accuracy 0.837, macro-F1 0.744; product root with cross-validated leaves: 0.852, 0.791.

A tree travels as arrays (children, split feature and threshold, missing-value direction, leaf
class frequencies): a model, never rows. It is evaluated here by a vectorised walk (one step
per tree level for all rows at once) because files a user loads are never unpickled, so a
scikit-learn object cannot be stored; ``tests/fedpc/test_fcdt.py`` checks the walk against
scikit-learn's own ``predict_proba``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.tree import DecisionTreeClassifier

from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.base import Federation
from fedpgm.federation.codec import Message
from fedpgm.files import atomic_folder

ARRAYS = ("left", "right", "feature", "threshold", "missing_left", "proba")
LEAF_SIZES = (5, 10, 20, 50, 100, 200)  # candidates for a client's cross-validated min_samples_leaf
BAGGING_LEAF = 5  # min_samples_leaf under a mean root
PRIOR_MIX = 0.01  # product root: each tree's leaf frequencies mixed with the prior, so that one
#                   client's pure leaf (a frequency of 0) cannot veto every other client's evidence
COMBINES = ("auto", "mean", "product")


def choose_min_samples_leaf(X: np.ndarray, y: np.ndarray, max_depth: int | None, seed: int) -> int:
    """The entry of ``LEAF_SIZES`` (at most a tenth of the rows) with the best 5-fold
    cross-validated log-loss; the smallest when a class has fewer than 5 rows."""
    sizes = sorted({min(s, max(1, len(y) // 10)) for s in LEAF_SIZES})
    if len(sizes) == 1 or np.bincount(y).min() < 5 or len(np.unique(y)) < 2:
        return sizes[0]
    search = GridSearchCV(DecisionTreeClassifier(max_depth=max_depth, random_state=seed), {"min_samples_leaf": sizes},
                          scoring="neg_log_loss", cv=StratifiedKFold(5, shuffle=True, random_state=seed))
    return int(search.fit(X, y).best_params_["min_samples_leaf"])


@dataclass
class Tree:
    """One client's tree over ``columns``; node arrays of length n_nodes, ``proba`` (n_nodes, K)."""

    columns: list[str]
    left: np.ndarray  # child index, -1 at leaves; children always follow their parent
    right: np.ndarray
    feature: np.ndarray  # index into ``columns`` (-2 at leaves)
    threshold: np.ndarray  # go left when x <= threshold
    missing_left: np.ndarray  # where a missing value goes (1 = left)
    proba: np.ndarray  # class frequencies of the training rows reaching each node
    weight: float  # the client's training rows
    min_samples_leaf: int | None = None  # the leaf size it was fitted with (reported, not stored)

    @staticmethod
    def fit(frame: pd.DataFrame, schema: Schema, max_depth: int | None, min_samples_leaf: int | None,
            seed: int, bootstrap: bool = False) -> "Tree":
        """Fit on ``frame``'s feature columns against ``schema.label`` (codes 0..K-1), or with
        ``bootstrap`` on len(frame) rows drawn from it with replacement (by ``seed``);
        ``min_samples_leaf`` None: chosen by cross-validation (``choose_min_samples_leaf``)."""
        label = schema.label
        columns = schema.feature_names
        if not columns:
            raise FedpgmError("a client holds only the label; FC[DT] needs at least one feature column")
        y = frame[label].to_numpy(dtype=int)
        X = frame[columns].to_numpy(dtype=float)
        if bootstrap:
            rows = np.random.default_rng(seed).integers(0, len(y), len(y))
            X, y = X[rows], y[rows]
        if min_samples_leaf is None:
            min_samples_leaf = choose_min_samples_leaf(X, y, max_depth, seed)
        clf = DecisionTreeClassifier(max_depth=max_depth, min_samples_leaf=min_samples_leaf, random_state=seed)
        clf.fit(X, y)
        t = clf.tree_
        counts = np.zeros((t.node_count, schema[label].cardinality))
        counts[:, clf.classes_] = t.value[:, 0, :]
        missing = getattr(t, "missing_go_to_left", np.ones(t.node_count, np.uint8))
        return Tree(columns, t.children_left.astype(np.int64), t.children_right.astype(np.int64),
                    t.feature.astype(np.int64), t.threshold.astype(float), np.asarray(missing, np.int64),
                    counts / counts.sum(axis=1, keepdims=True), float(len(frame)), int(min_samples_leaf))

    def check(self, what: str) -> None:
        """Refuse arrays that do not form a tree over ``columns`` (names ``what`` in the error)."""
        n = len(self.left)
        shapes = [len(a) for a in (self.right, self.feature, self.threshold, self.missing_left)]
        if n == 0 or any(s != n for s in shapes) or self.proba.ndim != 2 or len(self.proba) != n:
            raise FedpgmError(f"{what}: node arrays of different lengths")
        inner = self.left >= 0
        nodes = np.arange(n)
        if (np.any((self.right >= 0) != inner) or np.any(self.left[inner] <= nodes[inner])
                or np.any(self.right[inner] <= nodes[inner]) or np.any(self.left >= n) or np.any(self.right >= n)):
            raise FedpgmError(f"{what}: children must follow their parent inside the node arrays")
        if np.any((self.feature[inner] < 0) | (self.feature[inner] >= len(self.columns))):
            raise FedpgmError(f"{what}: a split names a column outside {self.columns}")
        if not (np.all(np.isfinite(self.proba)) and np.allclose(self.proba.sum(axis=1), 1.0)
                and np.all(self.proba >= 0)) or not self.weight > 0:
            raise FedpgmError(f"{what}: leaf class frequencies must be non-negative and sum to 1")

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """X (rows, len(columns)) -> (rows, K): the class frequencies of the leaf each row reaches."""
        node = np.zeros(len(X), dtype=np.int64)
        rows = np.arange(len(X))
        active = self.left[node] >= 0
        while active.any():
            r, k = rows[active], node[active]
            x = X[r, self.feature[k]]
            go_left = np.where(np.isnan(x), self.missing_left[k] == 1, x <= self.threshold[k])
            node[r] = np.where(go_left, self.left[k], self.right[k])
            active[r] = self.left[node[r]] >= 0
        return self.proba[node]

    @staticmethod
    def from_arrays(arrays: dict, columns: list[str], weight: float, what: str) -> "Tree":
        tree = Tree(list(columns), *(np.asarray(arrays[k]) for k in ARRAYS[:-1]),
                    np.asarray(arrays["proba"], dtype=float), float(weight))
        tree.check(what)
        return tree


def trees_message(trees: list[Tree]) -> Message:
    """One client's trees (over the same columns) as arrays ``{b}/{name}``."""
    first = trees[0]
    return Message("trees", {f"{b}/{k}": getattr(t, k) for b, t in enumerate(trees) for k in ARRAYS},
                   {"columns": first.columns, "weight": first.weight, "trees": len(trees),
                    "min_samples_leaf": first.min_samples_leaf})


def trees_from_message(m: Message, what: str) -> list[Tree]:
    n = m.config.get("trees")
    if not isinstance(n, int) or n < 1 or any(f"{b}/{k}" not in m.arrays for b in range(n) for k in ARRAYS):
        raise FedpgmError(f"{what}: the reply does not hold the trees it announces")
    return [Tree.from_arrays({k: m.arrays[f"{b}/{k}"] for k in ARRAYS}, m.config["columns"], m.config["weight"],
                             f"{what}, tree {b}") for b in range(n)]


class TreeBagging:
    """The FC[DT] model over each client's ``trees``. A client's expert p_k(label | x_k) is the
    mean of its trees; ``combine`` "mean" gives p(label | x) = sum_k w_k p_k / sum_k w_k (w_k:
    rows); "product" gives p(label | x) proportional to prod_k p_k / prior^(K-1), each expert's
    probabilities mixed with the prior (PRIOR_MIX)."""

    def __init__(self, trees: dict[str, list[Tree]], label: str, classes: list[str], info: dict | None = None,
                 combine: str = "mean") -> None:
        if combine not in COMBINES[1:]:
            raise FedpgmError(f"unknown FC[DT] root '{combine}'; use mean or product")
        self.trees, self.label, self.classes, self.combine = trees, label, list(classes), combine
        self.info = info or {}

    def predict_proba(self, frame: pd.DataFrame) -> np.ndarray:
        """(rows, K) class probabilities; ``frame`` needs every column a tree splits on."""
        weight = {c: ts[0].weight for c, ts in self.trees.items()}
        total = sum(weight.values())
        prior = np.maximum(sum(weight[c] / total * np.mean([t.proba[0] for t in ts], axis=0)
                               for c, ts in self.trees.items()), 1e-12)  # (K,)
        out = np.zeros((len(frame), len(self.classes)))
        for client, ts in self.trees.items():
            columns = ts[0].columns
            missing = [c for c in columns if c not in frame.columns]
            if missing:
                raise FedpgmError(f"the rows lack column(s) {missing} that client '{client}'s trees use")
            X = frame[columns].to_numpy(dtype=float)
            p = np.mean([t.predict_proba(X) for t in ts], axis=0)
            if self.combine == "mean":
                out += weight[client] / total * p
            else:
                out += np.log((1 - PRIOR_MIX) * p + PRIOR_MIX * prior) - np.log(prior)
        if self.combine == "mean":
            return out
        out += np.log(prior)
        out = np.exp(out - out.max(axis=1, keepdims=True))
        return out / out.sum(axis=1, keepdims=True)

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return self.predict_proba(frame).argmax(axis=1)

    def save(self, folder: str | Path) -> None:
        """``trees.json`` (structure) + ``trees.npz`` (arrays), written atomically."""
        meta = {"format": "fedpgm-fcdt-1", "label": self.label, "classes": self.classes, "info": self.info,
                "combine": self.combine,
                "trees": [{"client": c, "columns": t.columns, "weight": t.weight}
                          for c, ts in self.trees.items() for t in ts]}
        arrays = {f"{i}_{k}": getattr(t, k) for i, t in enumerate(t for ts in self.trees.values() for t in ts)
                  for k in ARRAYS}
        with atomic_folder(folder) as tmp:
            (tmp / "trees.json").write_text(json.dumps(meta, indent=1))
            np.savez(tmp / "trees.npz", **arrays)

    @staticmethod
    def load(folder: str | Path) -> "TreeBagging":
        folder = Path(folder)
        try:
            meta = json.loads((folder / "trees.json").read_text())
            with np.load(folder / "trees.npz", allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except FileNotFoundError as e:
            raise FedpgmError(f"{folder} is not an FC[DT] model folder ({e.filename} is missing)") from None
        except (ValueError, OSError) as e:
            raise FedpgmError(f"{folder}: damaged FC[DT] files ({e})") from None
        if meta.get("format") != "fedpgm-fcdt-1":
            raise FedpgmError(f"{folder}/trees.json is not an FC[DT] model (format {meta.get('format')!r})")
        trees = {}
        for i, entry in enumerate(meta["trees"]):
            keys = {k: f"{i}_{k}" for k in ARRAYS}
            if any(v not in arrays for v in keys.values()):
                raise FedpgmError(f"{folder}/trees.npz lacks the arrays of tree {i}")
            tree = Tree.from_arrays({k: arrays[v] for k, v in keys.items()}, entry["columns"], entry["weight"],
                                    f"{folder}, tree {i}")
            if tree.proba.shape[1] != len(meta["classes"]):
                raise FedpgmError(f"{folder}, tree {i}: {tree.proba.shape[1]} classes, "
                                  f"the model has {len(meta['classes'])}")
            same = trees.setdefault(entry["client"], [])
            if same and (tree.columns != same[0].columns or tree.weight != same[0].weight):
                raise FedpgmError(f"{folder}, tree {i}: client '{entry['client']}'s trees differ in columns or rows")
            same.append(tree)
        combine = meta.get("combine", "mean")  # files written before the product root: mean
        if combine not in COMBINES[1:]:
            raise FedpgmError(f"{folder}/trees.json: unknown FC[DT] root {combine!r}; expected mean or product")
        return TreeBagging(trees, meta["label"], meta["classes"], meta.get("info"), combine)


def fit_fcdt(fed: Federation, max_depth: int | None = None, min_samples_leaf: int | None = None,
             seed: int = 0, combine: str = "auto", trees: int = 1) -> TreeBagging:
    """FC[DT] in one round: every client holding the label fits its tree (``trees`` > 1: that
    many bootstrap trees); the server joins them (``combine`` "auto": product when the clients'
    columns are disjoint, mean otherwise; ``min_samples_leaf`` None: 5 under a mean root, each
    client's cross-validated choice under a product root)."""
    t0 = time.perf_counter()
    if combine not in COMBINES:
        raise FedpgmError(f"unknown FC[DT] root '{combine}'; use one of {list(COMBINES)}")
    if (min_samples_leaf is not None and min_samples_leaf < 1) or (max_depth is not None and max_depth < 1):
        raise FedpgmError("FC[DT] needs min_samples_leaf >= 1 (or none: chosen for the root) and "
                          "max_depth >= 1 (or none)")
    if not isinstance(trees, int) or trees < 1:
        raise FedpgmError(f"--trees {trees}: each client fits at least 1 tree")
    described = fed.broadcast("describe").require_all()
    schemas = {c: Schema.from_dict(m.config["schema"]) for c, m in described.items()}
    labels = {s.label for s in schemas.values() if s.label is not None}
    if len(labels) > 1:
        raise FedpgmError(f"clients name different labels {sorted(labels)}; agree on one")
    holders = [c for c, s in schemas.items() if s.label is not None]
    if not holders:
        raise FedpgmError("no client holds the label; FC[DT] trains on labelled rows (give the label to "
                          "one client or all: --label-to)")
    if combine == "auto":
        columns = [set(schemas[c].feature_names) for c in holders]
        combine = "product" if len(columns) > 1 and sum(map(len, columns)) == len(set().union(*columns)) else "mean"
    if min_samples_leaf is None and combine == "mean":
        min_samples_leaf = BAGGING_LEAF
    replies = fed.broadcast("fit_tree", config={"max_depth": max_depth, "min_samples_leaf": min_samples_leaf,
                                                "seed": seed, "trees": trees}, clients=holders).require_all()
    fitted = {c: trees_from_message(m, f"client '{c}'") for c, m in sorted(replies.items())}
    label = labels.pop()
    classes = list(schemas[holders[0]][label].categories)
    client_seconds = {c: float(m.config["seconds"]) for c, m in replies.items()}
    info = {"clients_with_trees": sorted(fitted), "trees_per_client": trees, "train_seconds": time.perf_counter() - t0,
            "client_seconds": client_seconds, "combine": combine,
            "min_samples_leaf": {c: m.config.get("min_samples_leaf") for c, m in sorted(replies.items())},
            "critical_path_seconds": max(client_seconds.values()),
            "communication": fed.ledger.totals()}
    return TreeBagging(fitted, label, classes, info, combine)

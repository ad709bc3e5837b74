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

``ensemble="boosting"`` (``--ensemble boosting``) makes each client's expert gradient-boosted
trees instead (scikit-learn's ``GradientBoostingClassifier``, whose fitted trees are public
tree arrays, unlike HistGradientBoosting's, given the latter's tree shape and early-stopped on a
tenth of the client's rows): still one message per client, joined by
the same root (``plan_root``). Adult, 3 seeds, accuracy / macro-F1: horizontal x5 0.869 / 0.806,
vertical x2 0.860 / 0.807, hybrid x3 0.850 / 0.788 (one bagged tree per client: 0.852 / 0.783,
0.846 / 0.787, 0.834 / 0.746; docs/fedpc.md).

A tree travels as arrays (children, split feature and threshold, missing-value direction, node
values): a model, never rows. It is evaluated here by a vectorised walk (one step per tree level
for all rows at once) because files a user loads are never unpickled, so a scikit-learn object
cannot be stored; ``tests/fedpc/test_fcdt.py`` checks the walk against scikit-learn's own
``predict_proba``, for bagged and boosted experts.
"""

from __future__ import annotations

import json
import time
import zipfile
from dataclasses import dataclass
from typing import Any, cast
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.tree import DecisionTreeClassifier

from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.model_files import (SEAL, BadModelFile, check_file, check_keys, check_schema_doc, check_seal, file_record,
                                need, need_float, need_int, need_list, read_json, seal)
from fedpgm.federation.base import Federation
from fedpgm.federation.codec import Message
from fedpgm.federation.psi import align_rows, check_align
from fedpgm.files import atomic_folder

ARRAYS = ("left", "right", "feature", "threshold", "missing_left", "value")
LEAF_SIZES = (5, 10, 20, 50, 100, 200)  # candidates for a client's cross-validated min_samples_leaf
BAGGING_LEAF = 5  # min_samples_leaf under a mean root
PRIOR_MIX = 0.01  # product root: each expert's probabilities mixed with the prior, so that one
#                   client's pure leaf (a frequency of 0) cannot veto every other client's evidence
COMBINES = ("auto", "mean", "product")
FORMAT = "fedpgm-fcdt-3"  # trees.json; 3: sealed; older ones are refused with a hint to refit
ENSEMBLES = ("bagging", "boosting")
MAX_TREES = 10_000  # trees per expert a model file may list
BOOSTING_STAGES = 100  # the most boosting stages when --trees is not given (early stopping may end sooner)
BOOST_MIN_LEAF = 20
BOOSTING = {"learning_rate": 0.1, "max_depth": None, "max_leaf_nodes": 31, "min_samples_leaf": BOOST_MIN_LEAF,
            "validation_fraction": 0.1, "n_iter_no_change": 10}  # HistGradientBoosting's tree shape
SHARED = {"bagging": "each labelled client's trees: split columns and thresholds, leaf class frequencies; its "
                      "class frequencies and row count",
          "boosting": "each labelled client's boosted trees: split columns and thresholds, leaf scores; its class "
                      "frequencies, row count and column medians (its fill for missing values)"}
EARLY_STOP_ROWS = 10  # each class needs this many rows for a stratified early-stopping split


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
    """One fitted tree as node arrays of length n_nodes. ``value`` (n_nodes, K) is what a row
    reaching a node gets: class frequencies (a bagged tree) or additive class scores (a boosting
    stage)."""

    left: np.ndarray  # child index, -1 at leaves; children always follow their parent
    right: np.ndarray
    feature: np.ndarray  # column index (-2 at leaves)
    threshold: np.ndarray  # go left when x <= threshold
    missing_left: np.ndarray  # where a missing value goes (1 = left)
    value: np.ndarray

    @staticmethod
    def from_sklearn(t, value: np.ndarray) -> "Tree":
        """From a fitted scikit-learn ``tree_`` and its (n_nodes, K) node values."""
        missing = getattr(t, "missing_go_to_left", np.ones(t.node_count, np.uint8))
        return Tree(t.children_left.astype(np.int64), t.children_right.astype(np.int64), t.feature.astype(np.int64),
                    t.threshold.astype(float), np.asarray(missing, np.int64), np.asarray(value, dtype=float))

    def check(self, n_columns: int, what: str) -> None:
        """Refuse arrays that do not form a tree over ``n_columns`` columns."""
        n = len(self.left)
        shapes = [len(a) for a in (self.right, self.feature, self.threshold, self.missing_left)]
        if n == 0 or any(s != n for s in shapes) or self.value.ndim != 2 or len(self.value) != n:
            raise FedpgmError(f"{what}: node arrays of different lengths")
        inner = self.left >= 0
        nodes = np.arange(n)
        if (np.any((self.right >= 0) != inner) or np.any(self.left[inner] <= nodes[inner])
                or np.any(self.right[inner] <= nodes[inner]) or np.any(self.left >= n) or np.any(self.right >= n)):
            raise FedpgmError(f"{what}: children must follow their parent inside the node arrays")
        if np.any((self.feature[inner] < 0) | (self.feature[inner] >= n_columns)):
            raise FedpgmError(f"{what}: a split names a column outside the client's {n_columns}")
        if not np.all(np.isfinite(self.value)):
            raise FedpgmError(f"{what}: node values must be finite")

    def leaf_values(self, X: np.ndarray) -> np.ndarray:
        """X (rows, columns) -> (rows, K): the value of the leaf each row reaches. Values are
        compared as float32, as scikit-learn's trees compare them."""
        X = np.asarray(X, dtype=np.float32)
        node = np.zeros(len(X), dtype=np.int64)
        rows = np.arange(len(X))
        active = self.left[node] >= 0
        while active.any():
            r, k = rows[active], node[active]
            x = X[r, self.feature[k]]
            go_left = np.where(np.isnan(x), self.missing_left[k] == 1, x <= self.threshold[k])
            node[r] = np.where(go_left, self.left[k], self.right[k])
            active[r] = self.left[node[r]] >= 0
        return self.value[node]


def fit_bagging(X: np.ndarray, y: np.ndarray, classes: int, max_depth: int | None, min_samples_leaf: int,
                seed: int, trees: int) -> list[Tree]:
    """One classification tree on all rows, or ``trees`` > 1 on bootstrap resamples (seeds
    seed, seed + 1, ...); each node's value is its training rows' class frequencies."""
    out = []
    for b in range(trees):
        Xb, yb = X, y
        if trees > 1:
            rows = np.random.default_rng(seed + b).integers(0, len(y), len(y))
            Xb, yb = X[rows], y[rows]
        clf = DecisionTreeClassifier(max_depth=max_depth, min_samples_leaf=min_samples_leaf,
                                     random_state=seed + b).fit(Xb, yb)
        counts = np.zeros((clf.tree_.node_count, classes))
        counts[:, clf.classes_] = clf.tree_.value[:, 0, :]
        out.append(Tree.from_sklearn(clf.tree_, counts / counts.sum(axis=1, keepdims=True)))
    return out


def fit_boosting(X: np.ndarray, y: np.ndarray, classes: int, max_depth: int | None, min_samples_leaf: int,
                 seed: int, stages: int) -> tuple[list[Tree], np.ndarray]:
    """scikit-learn's ``GradientBoostingClassifier`` (log-loss, at most ``stages`` stages, early
    stopping on a tenth of the rows when every class has ``EARLY_STOP_ROWS``), unrolled into
    trees whose leaves hold learning-rate-scaled class scores, and the (K,) initial scores; a
    class the client never saw scores -inf. One class only: no trees, Laplace-smoothed log
    frequencies."""
    counts = np.bincount(y, minlength=classes)
    present = np.flatnonzero(counts)
    if len(present) < 2:
        return [], np.log((counts + 1.0) / (len(y) + classes))
    early = counts[present].min() >= EARLY_STOP_ROWS
    params = BOOSTING | {"n_estimators": stages, "random_state": seed, "min_samples_leaf": min_samples_leaf,
                         "max_depth": max_depth, "n_iter_no_change": BOOSTING["n_iter_no_change"] if early else None}
    gbc = GradientBoostingClassifier(**params).fit(X, y)
    prior = gbc.init_.class_prior_  # on the rows it trained on (early stopping holds some out)
    bias = np.full(classes, -np.inf)
    if len(present) == 2:  # one tree per stage, scoring the second class against the first
        bias[present] = [0.0, np.log(prior[1] / prior[0])]
    else:
        bias[present] = np.log(prior)
    trees = []
    for stage in gbc.estimators_:
        for j, reg in enumerate(stage):
            value = np.zeros((reg.tree_.node_count, classes))
            value[:, present[-1] if len(present) == 2 else present[j]] = gbc.learning_rate * reg.tree_.value[:, 0, 0]
            trees.append(Tree.from_sklearn(reg.tree_, value))
    return trees, bias


@dataclass
class Expert:
    """One client's p(label | its columns). ``bagging``: the mean of its trees' leaf
    frequencies; ``boosting``: softmax(bias + sum of its trees' leaf scores). ``fill``
    (columns,) replaces a missing value before the walk (boosting: the client's column medians,
    as scikit-learn's boosting takes no missing values; bagging: NaN, its trees route missing
    values themselves); ``prior`` (K,): the client's class frequencies."""

    columns: list[str]
    weight: float  # the client's training rows
    ensemble: str
    trees: list[Tree]
    bias: np.ndarray
    fill: np.ndarray
    prior: np.ndarray
    min_samples_leaf: int | None = None  # the leaf size it was fitted with (reported, not stored)

    @staticmethod
    def fit(frame: pd.DataFrame, schema: Schema, ensemble: str, max_depth: int | None,
            min_samples_leaf: int | None, seed: int, trees: int, min_leaf: int = 1) -> "Expert":
        """Fit on ``frame``'s feature columns against ``schema.label`` (codes 0..K-1).
        ``min_samples_leaf`` None: bagging chooses it by cross-validation
        (``choose_min_samples_leaf``, once, on all rows), boosting uses ``BOOSTING``'s, at most a
        tenth of the rows (as bagging's candidates): a client of 45 rows would otherwise grow
        stumps (breast cancer horizontal x10, 3 seeds: accuracy 0.944 with 20, 0.959 capped).
        Whichever way it is chosen, a leaf holds at least ``min_leaf`` rows (a client's floor)."""
        if ensemble not in ENSEMBLES:
            raise FedpgmError(f"unknown FC[DT] ensemble '{ensemble}'; use one of {list(ENSEMBLES)}")
        columns = schema.feature_names
        if not columns:
            raise FedpgmError("a client holds only the label; FC[DT] needs at least one feature column")
        classes = schema.label_feature.cardinality
        y = frame[schema.label].to_numpy(dtype=int)
        X = frame[columns].to_numpy(dtype=float)
        prior = np.bincount(y, minlength=classes) / len(y)
        if ensemble == "bagging":
            leaf = choose_min_samples_leaf(X, y, max_depth, seed) if min_samples_leaf is None else min_samples_leaf
            leaf = max(leaf, min_leaf)
            return Expert(columns, float(len(y)), ensemble, fit_bagging(X, y, classes, max_depth, leaf, seed, trees),
                          np.zeros(classes), np.full(len(columns), np.nan), prior, int(leaf))
        leaf = min(BOOST_MIN_LEAF, max(1, len(y) // 10)) if min_samples_leaf is None else min_samples_leaf
        leaf = max(leaf, min_leaf)
        with np.errstate(all="ignore"):
            fill = np.nan_to_num(np.nanmedian(X, axis=0)) if len(X) else np.zeros(len(columns))
        fitted, bias = fit_boosting(np.where(np.isnan(X), fill, X), y, classes, max_depth, leaf, seed, trees)
        return Expert(columns, float(len(y)), ensemble, fitted, bias, fill, prior, int(leaf))

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """X (rows, len(columns)) -> (rows, K) class probabilities."""
        X = np.where(np.isnan(X), self.fill, X)
        if self.ensemble == "bagging":
            return np.mean([t.leaf_values(X) for t in self.trees], axis=0)
        scores = self.bias + sum((t.leaf_values(X) for t in self.trees), np.zeros((len(X), len(self.bias))))
        scores = np.exp(scores - scores.max(axis=1, keepdims=True))
        return scores / scores.sum(axis=1, keepdims=True)

    def arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        """Every array, named ``{prefix}{tree}_{name}`` and ``{prefix}bias|fill|prior``."""
        out = {f"{prefix}{b}_{k}": getattr(t, k) for b, t in enumerate(self.trees) for k in ARRAYS}
        return out | {f"{prefix}bias": self.bias, f"{prefix}fill": self.fill, f"{prefix}prior": self.prior}

    def meta(self) -> dict:
        return {"columns": self.columns, "weight": self.weight, "ensemble": self.ensemble, "trees": len(self.trees),
                "min_samples_leaf": self.min_samples_leaf}

    @staticmethod
    def from_arrays(arrays: dict, meta: dict, classes: int | None, what: str, prefix: str = "") -> "Expert":
        """The inverse of ``arrays`` and ``meta``, every array checked (a crafted file or
        message cannot loop, index outside its columns or return non-probabilities)."""
        n, ensemble, columns = meta.get("trees"), meta.get("ensemble"), meta.get("columns")
        names = [f"{prefix}{b}_{k}" for b in range(n) for k in ARRAYS] if isinstance(n, int) and n >= 0 else None
        if (names is None or ensemble not in ENSEMBLES or not isinstance(columns, list)
                or any(k not in arrays for k in names + [f"{prefix}{k}" for k in ("bias", "fill", "prior")])):
            raise FedpgmError(f"{what}: the expert's arrays do not match its description")
        assert isinstance(n, int)  # (names is None otherwise)
        trees = [Tree(**{k: np.asarray(arrays[f"{prefix}{b}_{k}"]) for k in ARRAYS[:-1]},
                      value=np.asarray(arrays[f"{prefix}{b}_value"], dtype=float)) for b in range(n)]
        bias, fill, prior = (np.asarray(arrays[f"{prefix}{k}"], dtype=float) for k in ("bias", "fill", "prior"))
        k = len(prior) if classes is None else classes
        if len(bias) != k or len(prior) != k:
            raise FedpgmError(f"{what}: scores for {len(bias)} and frequencies for {len(prior)} classes, expected {k}")
        if len(fill) != len(columns):
            raise FedpgmError(f"{what}: missing-value fills for {len(fill)} columns, the expert has {len(columns)}")
        for b, t in enumerate(trees):
            t.check(len(columns), f"{what}, tree {b}")
            if t.value.shape[1] != k:
                raise FedpgmError(f"{what}, tree {b}: {t.value.shape[1]} classes, expected {k}")
            if ensemble == "bagging" and not (np.all(t.value >= 0) and np.allclose(t.value.sum(axis=1), 1.0)):
                raise FedpgmError(f"{what}, tree {b}: leaf class frequencies must be non-negative and sum to 1")
        if ((ensemble == "bagging" and not trees) or np.isnan(bias).any() or np.isposinf(bias).any()
                or not np.isfinite(bias).any() or not (np.all(prior >= 0) and np.isclose(prior.sum(), 1.0))
                or not float(meta.get("weight", 0)) > 0):
            raise FedpgmError(f"{what}: the expert's scores, class frequencies or row count are not valid")
        return Expert(list(columns), float(meta["weight"]), ensemble, trees, bias, fill, prior,
                      meta.get("min_samples_leaf"))


def expert_message(expert: Expert, reference: Expert | None = None) -> Message:
    """One client's expert (and its reference expert on the shared columns, arrays ``ref_*``):
    arrays and descriptions, a model, never rows."""
    arrays, config = expert.arrays(), expert.meta()
    if reference is not None:
        arrays |= reference.arrays("ref_")
        config["reference"] = reference.meta()
    return Message("expert", arrays, config)


def expert_from_message(m: Message, what: str) -> tuple[Expert, Expert | None]:
    reference = m.config.get("reference")
    return (Expert.from_arrays(m.arrays, m.config, None, what),
            None if reference is None else Expert.from_arrays(m.arrays, reference, None, f"{what}, reference", "ref_"))


class TreeCircuit:
    """The FC[DT] model: one root over each client's ``Expert`` p_k(label | x_k). ``combine``
    "mean" gives p(label | x) = sum_k w_k p_k / sum_k w_k (w_k: rows); "product" gives
    p(label | x) proportional to r(x) prod_k p_k / r(x), each expert's probabilities mixed with
    r (PRIOR_MIX), where the reference r is p(label | shared columns), the row-weighted mean of
    the clients' ``references`` (hybrid: the product of experts on blocks that are independent
    given the label and the columns every client holds), or the label's prior when there are
    none (vertical)."""

    def __init__(self, experts: dict[str, Expert], schema: Schema, info: dict | None = None,
                 combine: str = "mean", references: dict[str, Expert] | None = None) -> None:
        if combine not in COMBINES[1:]:
            raise FedpgmError(f"unknown FC[DT] root '{combine}'; use mean or product")
        if schema.label is None:
            raise FedpgmError("an FC[DT] model needs a schema with its label")
        self.experts, self.schema, self.combine = experts, schema, combine
        self.label, self.classes = schema.label, list(schema[schema.label].states)
        self.references = references or {}
        self.info = info or {}

    @staticmethod
    def mean(experts: dict[str, Expert], frame: pd.DataFrame) -> np.ndarray:
        """(rows, K): the row-weighted mean of the experts' class probabilities."""
        total = sum(e.weight for e in experts.values())
        out = np.zeros((len(frame), len(next(iter(experts.values())).prior)))
        for client, expert in experts.items():
            missing = [c for c in expert.columns if c not in frame.columns]
            if missing:
                raise FedpgmError(f"the rows lack column(s) {missing} that client '{client}'s trees use")
            out += expert.weight / total * expert.predict_proba(frame[expert.columns].to_numpy(dtype=float))
        return out

    def predict_proba(self, frame: pd.DataFrame, target: str | None = None) -> np.ndarray:
        """(rows, K) class probabilities; ``frame`` needs every column an expert uses; ``target``
        (the estimator API's argument) may only name the label."""
        if target is not None and target != self.label:
            raise FedpgmError(f"this FC[DT] model predicts only its label '{self.label}', not '{target}'")
        if self.combine == "mean":
            return self.mean(self.experts, frame)
        if self.references:
            ref = np.maximum(self.mean(self.references, frame), 1e-12)
        else:
            total = sum(e.weight for e in self.experts.values())
            ref = np.maximum(sum(e.weight / total * e.prior for e in self.experts.values()), 1e-12)
        out = np.log(ref) * np.ones((len(frame), 1))
        for client, expert in self.experts.items():
            p = self.mean({client: expert}, frame)
            out += np.log((1 - PRIOR_MIX) * p + PRIOR_MIX * ref) - np.log(ref)
        out = np.exp(out - out.max(axis=1, keepdims=True))
        return out / out.sum(axis=1, keepdims=True)

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return self.predict_proba(frame).argmax(axis=1)

    def save(self, folder: str | Path) -> None:
        """``trees.json`` (structure) + ``trees.npz`` (arrays), written atomically."""
        meta = {"format": FORMAT, "schema": self.schema.to_dict(), "info": self.info, "combine": self.combine,
                "experts": [{"client": c, **e.meta()} for c, e in self.experts.items()],
                "references": [{"client": c, **e.meta()} for c, e in self.references.items()]}
        arrays = {k: v for i, e in enumerate(self.experts.values()) for k, v in e.arrays(f"{i}_").items()}
        arrays |= {k: v for i, e in enumerate(self.references.values()) for k, v in e.arrays(f"r{i}_").items()}
        with atomic_folder(folder) as tmp:
            np.savez(tmp / "trees.npz", **cast(dict[str, Any], arrays))  # (names, not savez's options)
            meta["arrays"] = file_record(tmp / "trees.npz")
            (tmp / "trees.json").write_text(json.dumps(seal(meta), indent=1))

    @staticmethod
    def load(folder: str | Path) -> "TreeCircuit":
        folder = Path(folder)
        where = f"{folder}/trees.json"
        if not (folder / "trees.json").is_file():
            raise FedpgmError(f"{folder} is not an FC[DT] model folder (trees.json is missing)")
        meta = read_json(folder / "trees.json")
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            found = meta.get("format") if isinstance(meta, dict) else None
            raise FedpgmError(f"{where} is not an FC[DT] model of this version (format {found!r}, expected "
                              f"{FORMAT!r}); fit it again")
        check_seal(meta, where)
        check_document(meta, where)
        try:
            check_file(folder / "trees.npz", meta["arrays"], str(folder))
            with np.load(folder / "trees.npz", allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}  # (-inf scores and NaN fills are legitimate here)
        except FileNotFoundError as e:
            raise FedpgmError(f"{folder} is not an FC[DT] model folder ({e.filename} is missing)") from None
        except (ValueError, OSError, zipfile.BadZipFile) as e:
            raise FedpgmError(f"{folder}: damaged FC[DT] files ({e})") from None
        combine = meta["combine"]
        if combine not in COMBINES[1:]:
            raise FedpgmError(f"{where}: unknown FC[DT] root {combine!r}; expected mean or product")
        try:
            schema = Schema.from_dict(meta["schema"])
        except (KeyError, TypeError, ValueError) as e:
            raise FedpgmError(f"{where}: damaged schema ({e!r})") from None
        if schema.label is None:
            raise BadModelFile(f"{where}: field 'schema.label' is missing; an FC[DT] model has a label")
        k = schema.label_feature.cardinality
        entries = {"": meta["experts"], "r": meta["references"]}
        loaded: dict[str, dict] = {}
        for tag, listed in entries.items():
            loaded[tag] = {}
            for i, entry in enumerate(listed):
                what = f"{folder}, {'reference of ' if tag else 'client '}'{entry.get('client')}'"
                expert = Expert.from_arrays(arrays, entry, k, what, f"{tag}{i}_")
                unknown = [c for c in expert.columns if c not in schema.names or c == schema.label]
                if unknown:
                    raise FedpgmError(f"{what}: column(s) {unknown} are not features of the model's schema")
                loaded[tag][entry.get("client")] = expert
        return TreeCircuit(loaded[""], schema, meta.get("info"), combine, loaded["r"])


def check_document(meta: dict, where: str) -> None:
    """Every field of a ``trees.json`` typed and bounded before any array is read: a crafted file
    is refused naming its field (``BadModelFile``)."""
    check_keys(meta, where, "document", ("format", "schema", "info", "combine", "experts", "references", "arrays",
                                         SEAL))
    need(meta["info"], dict, where, "info")
    need(meta["combine"], str, where, "combine")
    check_schema_doc(meta["schema"], where)
    features = len(meta["schema"]["features"])
    for group in ("experts", "references"):
        for i, entry in enumerate(need_list(meta[group], where, group)):
            name = f"{group}[{i}]"
            check_keys(entry, where, name, ("client", "columns", "weight", "ensemble", "trees", "min_samples_leaf"))
            need(entry["client"], str, where, f"{name}.client")
            need(entry["ensemble"], str, where, f"{name}.ensemble")
            need_list(entry["columns"], where, f"{name}.columns", str)
            if len(entry["columns"]) > features:
                raise BadModelFile(f"{where}: field '{name}.columns' lists more columns than the schema has")
            need_float(entry["weight"], where, f"{name}.weight", 0.0)
            need_int(entry["trees"], where, f"{name}.trees", 0, MAX_TREES)
            if entry["min_samples_leaf"] is not None:
                need_int(entry["min_samples_leaf"], where, f"{name}.min_samples_leaf", 1)


def plan_root(schemas: dict[str, Schema], combine: str, ensemble: str) -> tuple[str, list[str]]:
    """The root over the label holders' ``schemas`` and, for a product, the columns every holder
    shares (its reference's columns; none in a vertical federation). A product needs at least two
    holders whose columns outside the shared ones are disjoint. "auto": a product there when no
    column is shared (vertical) or the experts are boosted (calibrated: on hybrid adult, seed 0,
    accuracy / macro-F1 0.863 / 0.803 against the mean's 0.862 / 0.787, while bagged trees lose
    accuracy under it: 0.831 vs 0.842), else the mean."""
    first = next(iter(schemas.values())).feature_names
    shared = [c for c in first if all(c in s.feature_names for s in schemas.values())] if len(schemas) > 1 else []
    private = [set(s.feature_names) - set(shared) for s in schemas.values()]
    separable = sum(1 for p in private if p) >= 2 and sum(map(len, private)) == len(set().union(*private))
    if combine == "auto":
        combine = "product" if separable and (not shared or ensemble == "boosting") else "mean"
    if combine == "product" and not separable:
        raise FedpgmError("a product root needs at least two label holders whose columns outside those they all "
                          "share are disjoint (vertical or hybrid); use --tree-root mean")
    return combine, shared if combine == "product" else []


def fit_fcdt(fed: Federation, max_depth: int | None = None, min_samples_leaf: int | None = None,
             seed: int = 0, combine: str = "auto", trees: int | None = None,
             ensemble: str = "bagging", align: str = "none") -> TreeCircuit:
    """FC[DT] in one round: every client holding the label fits its expert (``ensemble``
    "bagging": ``trees`` classification trees, default 1, more on bootstrap resamples;
    "boosting": gradient-boosted trees, at most ``trees`` stages, default ``BOOSTING_STAGES``)
    and, under a product root over hybrid clients, a reference expert on the shared columns; the
    server joins them (``combine``: ``plan_root``; bagging with ``min_samples_leaf`` None: 5
    under a mean root, each client's cross-validated choice under a product root); ``align``
    "psi": private row alignment first (``fedpgm.federation.psi``)."""
    alignment = align_rows(fed) if check_align(align) == "psi" else None
    t0 = time.perf_counter()
    if combine not in COMBINES:
        raise FedpgmError(f"unknown FC[DT] root '{combine}'; use one of {list(COMBINES)}")
    if ensemble not in ENSEMBLES:
        raise FedpgmError(f"unknown FC[DT] ensemble '{ensemble}'; use one of {list(ENSEMBLES)}")
    if (min_samples_leaf is not None and min_samples_leaf < 1) or (max_depth is not None and max_depth < 1):
        raise FedpgmError("FC[DT] needs min_samples_leaf >= 1 (or none: chosen for the root) and "
                          "max_depth >= 1 (or none)")
    trees = (1 if ensemble == "bagging" else BOOSTING_STAGES) if trees is None else trees
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
    combine, shared = plan_root({c: schemas[c] for c in holders}, combine, ensemble)
    if min_samples_leaf is None and combine == "mean" and ensemble == "bagging":
        min_samples_leaf = BAGGING_LEAF
    replies = fed.broadcast("fit_tree", config={"max_depth": max_depth, "min_samples_leaf": min_samples_leaf,
                                                "seed": seed, "trees": trees, "ensemble": ensemble,
                                                "reference_columns": shared},
                            clients=holders).require_all()
    fitted = {c: expert_from_message(m, f"client '{c}'") for c, m in sorted(replies.items())}
    experts = {c: e for c, (e, _) in fitted.items()}
    references = {c: r for c, (_, r) in fitted.items() if r is not None}
    if shared and len(references) != len(experts):
        raise FedpgmError(f"clients {sorted(set(experts) - set(references))} sent no reference expert on the "
                          "shared columns")
    label = labels.pop()
    features = {f.name: f for c in holders for f in schemas[c].features}  # every holder's columns, once
    schema = Schema(tuple(features[n] for n in dict.fromkeys(n for c in holders for n in schemas[c].names)), label)
    client_seconds = {c: float(m.config["seconds"]) for c, m in replies.items()}
    info = {"clients_with_trees": sorted(experts), "ensemble": ensemble, "trees_per_client": trees,
            "trees_fitted": {c: len(e.trees) for c, e in experts.items()}, "reference_columns": shared,
            "train_seconds": time.perf_counter() - t0, "client_seconds": client_seconds, "combine": combine,
            "min_samples_leaf": {c: e.min_samples_leaf for c, e in experts.items()},
            "critical_path_seconds": max(client_seconds.values()),
            "communication": fed.ledger.totals(), "shared_with_server": SHARED[ensemble],
            "single_class_clients": sorted(c for c, e in experts.items() if np.count_nonzero(e.prior) < 2)}
    policy = {c: m.config["policy"] for c, m in replies.items() if "policy" in m.config}
    if policy:
        info["client_policy"] = policy  # what each client's own privacy policy changed
    if alignment is not None:
        info["alignment"] = alignment
    return TreeCircuit(experts, schema, info, combine, references)

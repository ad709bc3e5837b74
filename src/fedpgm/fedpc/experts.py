"""FC[DT]'s experts: one client's p(label | its columns) as decision trees it fits on its own rows.

A client fits scikit-learn ``DecisionTreeClassifier``s (``ensemble="bagging"``: one tree on all
its rows, or B trees on bootstrap resamples, averaged) or gradient-boosted trees
(``ensemble="boosting"``: scikit-learn's ``GradientBoostingClassifier``, whose fitted trees are
public tree arrays, unlike HistGradientBoosting's, given the latter's tree shape and
early-stopped on a tenth of the client's rows) and sends them to the server as one message
(``expert_message``); the server joins the experts at a root (``fedpgm.fedpc.trees``).

A tree travels as arrays (children, split feature and threshold, missing-value direction, node
values): a model, never rows. It is evaluated here by a vectorised walk (one step per tree level
for all rows at once) because files a user loads are never unpickled, so a scikit-learn object
cannot be stored; ``tests/fedpc/test_fcdt.py`` checks the walk against scikit-learn's own
``predict_proba``, for bagged and boosted experts. Every array that arrives, in a message or a
model file, is checked (``Expert.from_arrays``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.tree import DecisionTreeClassifier

from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.codec import Message

ARRAYS = ("left", "right", "feature", "threshold", "missing_left", "value")
LEAF_SIZES = (5, 10, 20, 50, 100, 200)  # candidates for a client's cross-validated min_samples_leaf
ENSEMBLES = ("bagging", "boosting")
BOOST_MIN_LEAF = 20
BOOSTING = {"learning_rate": 0.1, "max_depth": None, "max_leaf_nodes": 31, "min_samples_leaf": BOOST_MIN_LEAF,
            "validation_fraction": 0.1, "n_iter_no_change": 10}  # HistGradientBoosting's tree shape
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

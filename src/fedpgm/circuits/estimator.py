"""scikit-learn estimators: ``LearnSPN`` and ``RatSPN``.

``fit(X, y=None, schema=None)`` takes a DataFrame whose columns are the schema's names (a
missing column is all-NaN, i.e. marginalised) or an array with one column per schema variable;
with no schema, every column is continuous. With ``y`` (class labels, scikit-learn's way), the
circuit models the joint of X's columns and a categorical ``target`` column, ``classes_`` holds
the labels, and ``predict`` returns them; ``score(X, y)`` is then the mean joint
log-likelihood. Fitted attributes end in ``_``: ``circuit_``, ``compiled_``, ``schema_``.
They are ``BaseEstimator``s (``clone``, ``get_params``, ``GridSearchCV``, ``cross_val_score``);
a query before ``fit`` raises scikit-learn's ``NotFittedError``. Parameters are checked as
scikit-learn checks its own (``_parameter_constraints``), at ``fit`` or earlier by
``check_params()``, and a bad one is a ``FedpgmError`` naming it and its allowed range.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from numbers import Integral, Real

import numpy as np
import pandas as pd
import torch
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import validate_data

from fedpgm.circuits import queries
from fedpgm.circuits.compiled import CompiledCircuit
from fedpgm.circuits.em import em, em_best_of
from fedpgm.circuits.io import check_meta, load_circuit, save_circuit
from fedpgm.circuits.latent_tree import LATENT_STATES
from fedpgm.circuits.leaves import ALPHA
from fedpgm.circuits.weighted import MIN_STD_FRACTION, std_floors
from fedpgm.circuits.learnspn import CONTINUOUS_LEAVES, LEAF_MODELS, learn_spn
from fedpgm.circuits.ratspn import rat_spn
from fedpgm.circuits.structure import Circuit, sum_of
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError
from fedpgm.params import CheckedParams, Interval, StrOptions


def as_matrix(X, schema: Schema) -> np.ndarray:
    """(rows, variables) float matrix in schema order."""
    if isinstance(X, pd.DataFrame):
        unknown = [c for c in X.columns if c not in schema]
        if unknown:
            raise FedpgmError(f"unknown column(s) {unknown}; the model's variables are {schema.names}")
        return X.reindex(columns=schema.names).to_numpy(dtype=float)
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[1] != len(schema):
        raise FedpgmError(f"expected {len(schema)} columns ({schema.names}), got shape {X.shape}")
    return X


class NotFitted(FedpgmError, NotFittedError):
    """A query before ``fit``: a one-line user error and scikit-learn's ``NotFittedError``."""


TARGET = "target"  # the label column added by ``fit(X, y)``


class CircuitEstimator(CheckedParams, ABC):
    """Shared query API; subclasses implement ``_learn(schema, X, floors) -> Circuit``. What
    callers ask of a learner (``fedpgm.circuits.learners.LearnerSpec``): it learns node circuits
    (``dense``), models the label as a variable (``takes_label``), and ``row_settings`` are its
    parameters counted in rows, which a FedPC client raises to its policy's ``min_rows``."""

    dense = False
    takes_label = True
    row_settings: tuple[str, ...] = ()
    precision = "float64"
    _parameter_constraints: dict = {
        "seed": [Interval(Integral, 0, 2**32 - 1, closed="both")],
        "precision": [StrOptions({"float64", "float32"})],
        "min_std_fraction": [Interval(Real, 0, None, closed="left")],
        "leaf": [StrOptions(set(CONTINUOUS_LEAVES))],
    }

    def fit(self, X, y=None, schema: Schema | None = None, reference=None,
            floors: np.ndarray | None = None) -> "CircuitEstimator":
        """Learn from ``X`` (and class labels ``y``). Continuous leaves keep a std of at least
        ``min_std_fraction`` of their column's std in ``reference`` (rows like ``X``; default
        ``X`` itself: FedPC passes a client's whole table when it learns one circuit per
        cluster), or of ``floors`` (one per column) where given. A ``Schema`` as second argument
        is taken as ``schema``."""
        self.check_params()
        if isinstance(y, Schema):
            schema, y = y, None
        # scikit-learn's input checks (2-d, not empty, not complex or sparse, no inf; NaN is a
        # missing value), n_features_in_ and feature_names_in_
        validate_data(self, X, reset=True, ensure_all_finite="allow-nan", dtype=float)
        if schema is None:
            if isinstance(X, pd.DataFrame):
                names = [str(c) for c in X.columns]
            else:
                names = [f"x{i}" for i in range(np.asarray(X).shape[1])]
            schema = Schema(tuple(Feature(n, "continuous") for n in names))
        if y is not None:
            X, schema, reference = self._with_labels(X, y, schema), self._labelled(schema), None
        else:
            self.classes_: np.ndarray | None = None
        self.schema_ = schema
        X = as_matrix(X, schema)
        if floors is None:
            floors = std_floors(X if reference is None else as_matrix(reference, schema), self.min_std_fraction)
        self.circuit_ = self._learn(schema, X, floors)
        self.compiled_ = self._compile(self.circuit_)
        return self

    def _compile(self, circuit: Circuit) -> CompiledCircuit:
        """Evaluation precision: ``float64`` (exact to ~1e-12) or ``float32`` (about 2x faster)."""
        dtypes = {"float64": torch.float64, "float32": torch.float32}
        if self.precision not in dtypes:
            raise FedpgmError(f"precision must be 'float64' or 'float32', got {self.precision!r}")
        return CompiledCircuit(circuit, dtype=dtypes[self.precision])

    @abstractmethod
    def _learn(self, schema: Schema, X: np.ndarray, floors: np.ndarray) -> Circuit:
        """Learn a circuit over ``schema`` from X (rows, variables), leaf stds >= ``floors``."""

    def _with_labels(self, X, y, schema: Schema) -> pd.DataFrame:
        """X as a frame with the label codes of ``y`` as column ``target``; sets ``classes_``."""
        if schema.label is not None or TARGET in schema:
            raise FedpgmError(f"fit(X, y) adds the label as column '{TARGET}'; the schema must have no label "
                              f"and no column of that name")
        self.classes_, codes = np.unique(np.asarray(y), return_inverse=True)
        frame = pd.DataFrame(as_matrix(X, schema), columns=schema.names)
        if len(frame) != len(codes):
            raise FedpgmError(f"X has {len(frame)} rows but y has {len(codes)} labels")
        frame[TARGET] = codes.astype(float)
        return frame

    def _labelled(self, schema: Schema) -> Schema:
        assert self.classes_ is not None  # (set by _with_labels)
        cats = tuple(str(c) for c in self.classes_)
        return Schema(schema.features + (Feature(TARGET, "categorical", cats),), TARGET)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # a missing value: marginalised in queries, skipped in fit
        return tags

    def _matrix(self, X, y=None) -> np.ndarray:
        """Query rows in schema order; for a model fitted with ``y``, X may leave out the label
        (unobserved) or ``y`` supplies it."""
        if not isinstance(X, pd.DataFrame):  # (a DataFrame may hold any subset of the columns)
            # (no finiteness pass here: the queries refuse infinite evidence, naming the variable)
            X = validate_data(self, X, reset=False, dtype=float, ensure_all_finite=False)
        classes = getattr(self, "classes_", None)
        if classes is not None and not (isinstance(X, pd.DataFrame) and TARGET in X):
            frame = pd.DataFrame(np.asarray(X, dtype=float) if not isinstance(X, pd.DataFrame) else X)
            if not isinstance(X, pd.DataFrame):
                frame.columns = self.schema_.names[:frame.shape[1]]
            codes = np.full(len(frame), np.nan)
            if y is not None:
                codes = np.searchsorted(classes, np.asarray(y)).astype(float)
                codes[~np.isin(np.asarray(y), classes)] = np.nan
            X = frame.assign(**{TARGET: codes})
        return as_matrix(X, self.schema_)

    def _check(self) -> CompiledCircuit:
        if not hasattr(self, "compiled_"):
            raise NotFitted(f"this {type(self).__name__} is not fitted yet; call fit first")
        return self.compiled_

    def log_likelihood(self, X, y=None) -> np.ndarray:
        """(rows,) log-likelihood in nats; NaN or absent columns are marginalised."""
        cc = self._check()
        return queries.log_likelihood(cc, self._matrix(X, y))

    def score_samples(self, X) -> np.ndarray:
        """(rows,) log-likelihood in nats (scikit-learn's name)."""
        return self.log_likelihood(X)

    def score(self, X, y=None) -> float:
        """Mean log-likelihood per row (nats); with ``y``, of the rows and their labels."""
        return float(self.log_likelihood(X, y).mean())

    def predict_proba(self, X, target: str | None = None) -> np.ndarray:
        """(rows, classes) probabilities of ``target`` (default: the label) given the rest."""
        cc = self._check()
        target = target or self.schema_.label
        if target is None:
            raise FedpgmError("predict_proba needs a target: pass target= or fit with a labelled schema")
        return queries.predict_proba(cc, self._matrix(X), target)

    def predict(self, X, target: str | None = None) -> np.ndarray:
        """(rows,) the most probable value of ``target``: the labels of ``fit(X, y)``, else the
        target's category names."""
        best = self.predict_proba(X, target).argmax(axis=1)
        classes = getattr(self, "classes_", None)
        if classes is not None and target in (None, TARGET):
            return classes[best]
        name = target or self.schema_.label
        assert name is not None  # (predict_proba refuses a query without a target)
        return np.asarray(self.schema_[name].states, dtype=object)[best]

    def conditional(self, X, query: list[str]) -> np.ndarray:
        return queries.conditional(self._check(), self._matrix(X), query)

    def mpe(self, X):
        """X with its missing values filled by the most probable explanation: a DataFrame in, a
        DataFrame out (the schema's column names, X's index), else an array in schema order."""
        filled = queries.mpe(self._check(), self._matrix(X))
        if isinstance(X, pd.DataFrame):
            return pd.DataFrame(filled, columns=self.schema_.names, index=X.index)
        return filled

    def sample(self, n: int | None = None, evidence=None, seed: int = 0) -> np.ndarray:
        ev = None if evidence is None else self._matrix(evidence)
        return queries.sample(self._check(), n, ev, seed)

    def save(self, folder) -> None:
        save_circuit(self.circuit_, folder, {"estimator": type(self).__name__, "params": self.get_params()})

    @classmethod
    def load(cls, folder) -> "CircuitEstimator":
        """The ``cls`` saved in ``folder`` (``fedpgm.circuits.learners.load_model`` loads any estimator's)."""
        circuit, meta = load_circuit(folder)
        if circuit.dense:
            raise FedpgmError(f"{folder} holds a dense circuit; load it with fedpgm.circuits.learners.load_model")
        return cls.from_circuit(circuit, check_meta(meta, False, str(folder), {cls.__name__: cls}))

    @classmethod
    def from_circuit(cls, circuit: Circuit, meta: dict) -> "CircuitEstimator":
        """A ``cls`` answering queries of ``circuit``, with the parameters ``meta`` records."""
        model = cls()
        known = model._get_param_names()
        model.set_params(**{k: v for k, v in meta.get("params", {}).items() if k in known})
        model.schema_, model.circuit_ = circuit.schema, circuit
        model.compiled_ = model._compile(circuit)
        return model


class LearnSPN(CircuitEstimator):
    """LearnSPN / Mixed SPN (``leaf="histogram"``); see ``fedpgm.circuits.learnspn``. ``alpha``:
    the leaves' pseudo-count per state or bin; ``row_clusters``: parts per row split;
    ``latent_states``: hidden states per variable of ``leaf_model="latent-tree"``;
    ``em_iterations``: EM passes over the training rows after the structure is learned
    (``fedpgm.circuits.em``; 0 keeps the counted parameters), each one batch EM step, or with
    ``em_batch_size`` one sweep of stepwise EM over shuffled mini-batches (pass k's order from
    ``seed + k``, its step sizes starting afresh). ``min_leaf_rows``: every parameter, learned or
    refitted by EM, is a statistic of at least that many rows (``learn_spn``, ``em``)."""

    row_settings = ("min_instances_slice",)
    _parameter_constraints = {
        **CircuitEstimator._parameter_constraints,
        "min_instances_slice": [Interval(Integral, 1, None, closed="left")],
        "threshold": [Interval(Real, 0, 1, closed="both")],
        "by_label": ["boolean"],
        "min_leaf_rows": [Interval(Integral, 1, None, closed="left")],
        "leaf_model": [StrOptions(set(LEAF_MODELS))],
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "row_clusters": [Interval(Integral, 2, None, closed="left")],
        "em_iterations": [Interval(Integral, 0, None, closed="left")],
        "latent_states": [Interval(Integral, 1, None, closed="left")],
        "em_batch_size": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(self, min_instances_slice: int = 100, threshold: float = 0.3, leaf: str = "gaussian",
                 seed: int = 0, precision: str = "float64", min_std_fraction: float = MIN_STD_FRACTION,
                 by_label: bool = False, min_leaf_rows: int = 1, leaf_model: str = "univariate",
                 alpha: float = ALPHA, row_clusters: int = 2, em_iterations: int = 0,
                 latent_states: int = LATENT_STATES, em_batch_size: int | None = None) -> None:
        self.min_instances_slice, self.threshold, self.leaf, self.seed = (
            min_instances_slice, threshold, leaf, seed)
        self.precision, self.min_std_fraction, self.by_label = precision, min_std_fraction, by_label
        self.min_leaf_rows = min_leaf_rows
        self.leaf_model = leaf_model
        self.alpha, self.row_clusters, self.em_iterations = alpha, row_clusters, em_iterations
        self.latent_states, self.em_batch_size = latent_states, em_batch_size

    def _learn(self, schema, X, floors):
        circuit = self.structure(schema, X, floors)
        for k in range(self.em_iterations):
            self.em_pass(circuit, X, k, floors)
        return circuit

    def structure(self, schema: Schema, X: np.ndarray, floors: np.ndarray, deadline: float = math.inf) -> Circuit:
        """The circuit LearnSPN learns on X (rows, variables) before any EM pass; past ``deadline``
        (a ``time.perf_counter()`` time) no slice is split (``learn_spn``)."""
        return learn_spn(schema, X, self.min_instances_slice, self.threshold, self.leaf, self.seed, floors=floors,
                         by_label=self.by_label, min_leaf_rows=self.min_leaf_rows, leaf_model=self.leaf_model,
                         alpha=self.alpha, row_clusters=self.row_clusters, latent_states=self.latent_states,
                         deadline=deadline)

    def em_pass(self, circuit, X: np.ndarray, k: int, floors: np.ndarray, deadline: float | None = None) -> bool:
        """EM pass ``k`` (from 0) over X, in place (as ``select_learnspn`` runs them one by one);
        whether it ended before ``deadline`` (``em``; a pass cut short leaves the circuit part-way)."""
        return len(em(circuit, X, 1, self.em_batch_size, seed=self.seed + k, floors=floors, alpha=self.alpha,
                      min_rows=self.min_leaf_rows, deadline=deadline)) == 1


class LearnSPNMixture(CircuitEstimator):
    """A mixture of LearnSPN circuits: ``components`` (each a dict of LearnSPN parameters) are
    learned on the same rows and joined by a sum node with ``weights`` (normalised), as
    ``select_learnspn`` chooses a mixture of its best LearnSPN and its latent tree."""

    _parameter_constraints = {
        **CircuitEstimator._parameter_constraints,
        "components": [list],
        "weights": [list],
    }

    def __init__(self, components: list | None = None, weights: list | None = None, leaf: str = "gaussian",
                 seed: int = 0, precision: str = "float64", min_std_fraction: float = MIN_STD_FRACTION) -> None:
        self.components, self.weights = components, weights
        self.leaf, self.seed, self.precision, self.min_std_fraction = leaf, seed, precision, min_std_fraction

    def _learn(self, schema, X, floors):
        components, weights = self.components or [], self.weights or []
        if not components or len(weights) != len(components):
            raise FedpgmError(f"a mixture needs components and one weight each, got {len(components)} "
                              f"components and {len(weights)} weights")
        unknown = sorted({k for settings in components for k in settings} - set(LearnSPN._get_param_names()))
        if unknown:
            raise FedpgmError(f"mixture components take LearnSPN's parameters; {unknown} are not among them")
        fixed = {"leaf": self.leaf, "seed": self.seed, "min_std_fraction": self.min_std_fraction}
        parts = [LearnSPN(**{**settings, **fixed}).check_params()._learn(schema, X, floors) for settings in components]
        return sum_of(parts, weights, schema)

    @classmethod
    def of(cls, models: list[LearnSPN], weights: list[float], **params) -> "LearnSPNMixture":
        """The mixture of fitted ``models`` (learned on the same rows): what ``fit`` with their
        settings as ``components`` would learn, without learning them again."""
        mixture = cls(components=[m.get_params() for m in models], weights=list(weights), **params)
        for name in ("schema_", "classes_", "n_features_in_", "feature_names_in_"):
            if hasattr(models[0], name):
                setattr(mixture, name, getattr(models[0], name))
        mixture.circuit_ = sum_of([m.circuit_ for m in models], weights, mixture.schema_)
        mixture.compiled_ = mixture._compile(mixture.circuit_)
        return mixture


class RatSPN(CircuitEstimator):
    """RAT-SPN structure + EM (batch, or mini-batch with ``batch_size``). EM stops in a local
    optimum that depends on the random initialisation (credit, 6 columns, 18,600 rows: 20
    iterations end at -6.03 or -4.35 nats per training row for seeds 0 and 1), so ``restarts``
    initialisations (seeds ``seed``, ``seed + 1``, ...) are each trained and the one with the
    highest training log-likelihood is kept, as k-means keeps the best of its ``n_init``.
    ``min_leaf_rows``: every parameter is a statistic of at least that many rows (the inputs'
    start and every M-step; ``fedpgm.circuits.ratspn``, ``fedpgm.circuits.em``); 1: no floor."""

    _parameter_constraints = {
        **CircuitEstimator._parameter_constraints,
        **{k: [Interval(Integral, 1, None, closed="left")] for k in ("depth", "repetitions", "n_sums", "n_inputs",
                                                                    "restarts")},
        "em_iterations": [Interval(Integral, 0, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "min_leaf_rows": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, depth: int = 2, repetitions: int = 4, n_sums: int = 4, n_inputs: int = 4,
                 leaf: str = "gaussian", em_iterations: int = 20, batch_size: int | None = None,
                 seed: int = 0, restarts: int = 1, precision: str = "float64",
                 min_std_fraction: float = MIN_STD_FRACTION, min_leaf_rows: int = 1) -> None:
        self.precision, self.min_std_fraction = precision, min_std_fraction
        self.depth, self.repetitions, self.n_sums, self.n_inputs = depth, repetitions, n_sums, n_inputs
        self.leaf, self.em_iterations, self.batch_size, self.seed = leaf, em_iterations, batch_size, seed
        self.restarts, self.min_leaf_rows = restarts, min_leaf_rows

    def _learn(self, schema, X, floors):
        self.train_loglik_, circuit, self.history_ = em_best_of(
            lambda r: rat_spn(schema, X, self.depth, self.repetitions, self.n_sums, self.n_inputs, self.leaf,
                              self.seed + r, floors, self.min_leaf_rows),
            X, self.restarts, self.em_iterations, self.batch_size, floors, self.seed, self.min_leaf_rows)
        return circuit


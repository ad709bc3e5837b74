"""Estimators in scikit-learn's style: ``LearnSPN`` and ``RatSPN``.

``fit(X, schema=None)`` takes a DataFrame whose columns are the schema's names (a missing
column is all-NaN, i.e. marginalised) or an array with one column per schema variable; with
no schema, every column is continuous. Fitted attributes end in ``_``: ``circuit_``,
``compiled_``, ``schema_``. Parameters are validated at ``fit`` with errors naming them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import pandas as pd
import torch

from fedpgm.circuits import queries
from fedpgm.circuits.compiled import CompiledCircuit
from fedpgm.circuits.em import em_best_of
from fedpgm.circuits.io import load_circuit, save_circuit
from fedpgm.circuits.leaves import MIN_STD_FRACTION, std_floors
from fedpgm.circuits.learnspn import learn_spn
from fedpgm.circuits.ratspn import rat_spn
from fedpgm.circuits.structure import Circuit
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError


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


class CircuitEstimator(ABC):
    """Shared query API; subclasses implement ``_learn(schema, X, floors) -> Circuit``."""

    _params: tuple[str, ...] = ()
    precision = "float64"

    def get_params(self, deep: bool = True) -> dict:
        return {k: getattr(self, k) for k in self._params}

    def set_params(self, **params) -> "CircuitEstimator":
        for k, v in params.items():
            if k not in self._params:
                raise FedpgmError(f"unknown parameter '{k}'; parameters are {list(self._params)}")
            setattr(self, k, v)
        return self

    def fit(self, X, schema: Schema | None = None, y=None, reference=None) -> "CircuitEstimator":
        """Learn from ``X``. Continuous leaves keep a std of at least ``min_std_fraction`` of
        their column's std in ``reference`` (rows like ``X``; default ``X`` itself: FedPC passes a
        client's whole table when it learns one circuit per cluster)."""
        if schema is None:
            if isinstance(X, pd.DataFrame):
                names = [str(c) for c in X.columns]
            else:
                names = [f"x{i}" for i in range(np.asarray(X).shape[1])]
            schema = Schema(tuple(Feature(n, "continuous") for n in names))
        self.schema_ = schema
        X = as_matrix(X, schema)
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

    def _check(self) -> CompiledCircuit:
        if not hasattr(self, "compiled_"):
            raise FedpgmError(f"this {type(self).__name__} is not fitted yet; call fit first")
        return self.compiled_

    def log_likelihood(self, X) -> np.ndarray:
        """(rows,) log-likelihood in nats; NaN or absent columns are marginalised."""
        cc = self._check()
        return queries.log_likelihood(cc, as_matrix(X, self.schema_))

    def score(self, X, y=None) -> float:
        """Mean log-likelihood per row (nats)."""
        return float(self.log_likelihood(X).mean())

    def predict_proba(self, X, target: str | None = None) -> np.ndarray:
        target = target or self.schema_.label
        if target is None:
            raise FedpgmError("predict_proba needs a target: pass target= or fit with a labelled schema")
        return queries.predict_proba(self._check(), as_matrix(X, self.schema_), target)

    def predict(self, X, target: str | None = None) -> np.ndarray:
        return self.predict_proba(X, target).argmax(axis=1)

    def conditional(self, X, query: list[str]) -> np.ndarray:
        return queries.conditional(self._check(), as_matrix(X, self.schema_), query)

    def mpe(self, X) -> np.ndarray:
        return queries.mpe(self._check(), as_matrix(X, self.schema_))

    def sample(self, n: int | None = None, evidence=None, seed: int = 0) -> np.ndarray:
        ev = None if evidence is None else as_matrix(evidence, self.schema_)
        return queries.sample(self._check(), n, ev, seed)

    def save(self, folder) -> None:
        save_circuit(self.circuit_, folder, {"estimator": type(self).__name__, "params": self.get_params()})

    @classmethod
    def load(cls, folder) -> "CircuitEstimator":
        circuit, meta = load_circuit(folder)
        by_name = {c.__name__: c for c in ESTIMATORS.values()}
        default = cls if cls is not CircuitEstimator else LearnSPN  # any class can answer queries
        model = by_name.get(meta.get("estimator"), default)()  # the class that saved it
        model.set_params(**{k: v for k, v in meta.get("params", {}).items() if k in cls._params})
        model.schema_, model.circuit_ = circuit.schema, circuit
        model.compiled_ = model._compile(circuit)
        return model


class LearnSPN(CircuitEstimator):
    """LearnSPN / Mixed SPN (``leaf="histogram"``); see ``fedpgm.circuits.learnspn``."""

    _params = ("min_instances_slice", "threshold", "leaf", "seed", "precision", "min_std_fraction", "by_label",
               "min_leaf_rows")

    def __init__(self, min_instances_slice: int = 100, threshold: float = 0.3, leaf: str = "gaussian",
                 seed: int = 0, precision: str = "float64", min_std_fraction: float = MIN_STD_FRACTION,
                 by_label: bool = False, min_leaf_rows: int = 1) -> None:
        self.min_instances_slice, self.threshold, self.leaf, self.seed = (
            min_instances_slice, threshold, leaf, seed)
        self.precision, self.min_std_fraction, self.by_label = precision, min_std_fraction, by_label
        self.min_leaf_rows = min_leaf_rows

    def _learn(self, schema, X, floors):
        return learn_spn(schema, X, self.min_instances_slice, self.threshold, self.leaf, self.seed, floors=floors,
                         by_label=self.by_label, min_leaf_rows=self.min_leaf_rows)


class RatSPN(CircuitEstimator):
    """RAT-SPN structure + EM (batch, or mini-batch with ``batch_size``). EM stops in a local
    optimum that depends on the random initialisation (credit, 6 columns, 18,600 rows: 20
    iterations end at -6.03 or -4.35 nats per training row for seeds 0 and 1), so ``restarts``
    initialisations (seeds ``seed``, ``seed + 1``, ...) are each trained and the one with the
    highest training log-likelihood is kept, as k-means keeps the best of its ``n_init``."""

    _params = ("depth", "repetitions", "n_sums", "n_inputs", "leaf", "em_iterations", "batch_size", "seed",
               "restarts", "precision", "min_std_fraction")

    def __init__(self, depth: int = 2, repetitions: int = 4, n_sums: int = 4, n_inputs: int = 4,
                 leaf: str = "gaussian", em_iterations: int = 20, batch_size: int | None = None,
                 seed: int = 0, restarts: int = 1, precision: str = "float64",
                 min_std_fraction: float = MIN_STD_FRACTION) -> None:
        self.precision, self.min_std_fraction = precision, min_std_fraction
        self.depth, self.repetitions, self.n_sums, self.n_inputs = depth, repetitions, n_sums, n_inputs
        self.leaf, self.em_iterations, self.batch_size, self.seed = leaf, em_iterations, batch_size, seed
        self.restarts = restarts

    def _learn(self, schema, X, floors):
        self.train_loglik_, circuit, self.history_ = em_best_of(
            lambda r: rat_spn(schema, X, self.depth, self.repetitions, self.n_sums, self.n_inputs, self.leaf,
                              self.seed + r, floors),
            X, self.restarts, self.em_iterations, self.batch_size, floors, self.seed)
        return circuit


ESTIMATORS = {"learnspn": LearnSPN, "ratspn": RatSPN}

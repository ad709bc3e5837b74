"""``DensePC``: a scikit-learn estimator around dense circuits (EiNet-style), for images first.

``DensePC(structure="pd", units=10, pieces=8)`` is the FedPC paper's MNIST model (Appendix E,
Table 5: Poon-Domingos with 8 pieces, K = 10, Gaussian inputs with variance in [1e-3, 0.25],
online EM with frequency 5 and step 0.1, batch 64, 5 epochs): those are the defaults.
``structure="quad-tree"`` halves the image down to pixels; ``"binary-trees"`` is RAT-SPN's
random region graph (``depth``, ``repetitions``) and needs no image: RAT-SPN's dense form (its
node form, for mixed column types, is the learner ``ratspn``: ``fedpgm.circuits.ratspn``). ``cell`` (pixels per PD cell
side) replaces ``pieces`` where a client holds a region of a larger image: FedPC sets it from
the whole image (side / pieces), so a client's circuit is its region's share of the whole.

On an image (columns ``pixel_ROW_COL``, ``fedpgm.data.images``) the circuit is a distribution
over pixel values 0..levels-1: Gaussian inputs are trained as densities on values scaled to
[0, 1] and report masses of the values' bins (the paper's discretisation), so
``log_likelihood`` is log P(image) in nats and ``bits_per_dim`` follows from it. Fitted
attributes: ``circuit_`` (the ``DenseCircuit``, which records its schema and columns),
``history_`` (training log-likelihood per epoch), ``train_seconds_``.

Devices: ``device="auto"`` is CUDA when torch sees a GPU, else the CPU; ``"cuda"`` without one
is an error.

``min_leaf_rows`` (a FedPC client's privacy floor; 1: none): every input's parameters are
statistics of at least that many rows, by EM's floored M-steps or, after Adam, a floored
projection (``fedpgm.circuits.dense_train``).
"""

from __future__ import annotations

import time
from numbers import Integral, Real
from typing import Callable

import numpy as np
import pandas as pd
import torch

from fedpgm.circuits import dense_train
from fedpgm.circuits.dense import DenseCircuit
from fedpgm.circuits.dense_inputs import INPUT_LAYERS, INPUTS
from fedpgm.circuits.estimator import NotFitted, as_matrix
from fedpgm.circuits.io import check_meta, load_circuit, save_circuit
from fedpgm.circuits.region_graph import STRUCTURES, build
from fedpgm.circuits.semiring import Semiring
from fedpgm.data import images
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError
from fedpgm.params import CheckedParams, Interval, StrOptions

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str) -> torch.device:
    if device not in DEVICES:
        raise FedpgmError(f"unknown device '{device}'; use one of {', '.join(DEVICES)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise FedpgmError("--device cuda, but torch sees no GPU here; use --device cpu (or auto)")
    return torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                        "cpu" if device == "auto" else device)


class DensePC(CheckedParams):
    """Dense circuit learner; see the module doc. It learns dense circuits and models the
    features only (``fedpgm.circuits.learners.LearnerSpec``)."""

    dense = True
    takes_label = False
    row_settings: tuple[str, ...] = ()
    _parameter_constraints: dict = {
        "structure": [StrOptions(set(STRUCTURES))],
        "units": [Interval(Integral, 1, None, closed="left")],
        "pieces": [Interval(Integral, 1, None, closed="left")],
        "cell": [Interval(Real, 1, None, closed="left"), None],
        "depth": [Interval(Integral, 1, None, closed="left")],
        "repetitions": [Interval(Integral, 1, None, closed="left")],
        "leaf": [StrOptions(set(INPUTS))],
        "method": [StrOptions(set(dense_train.METHODS))],
        "epochs": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "frequency": [Interval(Integral, 1, None, closed="left")],
        "step": [Interval(Real, 0, 1, closed="right")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "min_var": [Interval(Real, 0, None, closed="neither")],
        "max_var": [Interval(Real, 0, None, closed="neither")],
        "device": [StrOptions(set(DEVICES))],
        "seed": [Interval(Integral, 0, 2**32 - 1, closed="both")],
        "min_leaf_rows": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, structure: str = "pd", units: int = 10, pieces: int = 8, cell: float | None = None,
                 depth: int = 2, repetitions: int = 4, leaf: str = "gaussian", method: str = "online", epochs: int = 5,
                 batch_size: int = 64, frequency: int = 5, step: float = 0.1, lr: float = 0.05,
                 min_var: float = 1e-3, max_var: float = 0.25, device: str = "auto", seed: int = 0,
                 min_leaf_rows: int = 1) -> None:
        self.structure, self.units, self.pieces, self.cell, self.depth = structure, units, pieces, cell, depth
        self.repetitions, self.leaf, self.method, self.epochs = repetitions, leaf, method, epochs
        self.batch_size, self.frequency, self.step, self.lr = batch_size, frequency, step, lr
        self.min_var, self.max_var, self.device, self.seed = min_var, max_var, device, seed
        self.min_leaf_rows = min_leaf_rows

    def check_params(self) -> "DensePC":
        super().check_params()
        if self.min_var >= self.max_var:
            raise FedpgmError(f"min_var ({self.min_var}) must be below max_var ({self.max_var})")
        resolve_device(self.device)
        return self

    def fit(self, X, y=None, schema: Schema | None = None, reference=None,
            progress: Callable[[int, float], None] | None = None) -> "DensePC":
        """Learn from X (a frame with the schema's columns, or an array in its order); every
        column is a variable of the circuit, so leave the label out (or pass a schema without
        it). ``reference`` is accepted for FedPC's clients and unused."""
        self.check_params()
        if isinstance(y, Schema):
            schema, y = y, None
        if y is not None:
            raise FedpgmError("DensePC models the columns' joint distribution; it takes no labels (y)")
        if schema is None:
            names = [str(c) for c in X.columns] if isinstance(X, pd.DataFrame) else \
                [f"x{i}" for i in range(np.asarray(X).shape[1])]
            schema = Schema(tuple(Feature(n, "continuous") for n in names))
        self.schema_ = schema
        model = self.build(schema)
        data = as_matrix(X, schema)[:, model.columns]
        self.initialise(model, data)
        start = time.perf_counter()
        self.history_ = dense_train.train(model, data, self.method, self.epochs, self.batch_size, self.frequency,
                                          self.step, self.lr, self.seed, progress, self.min_leaf_rows)
        self.train_seconds_ = time.perf_counter() - start
        self.circuit_ = model
        return self

    def check_data(self, schema: Schema) -> tuple[tuple[int, int] | None, list[int], int | None]:
        """(image shape or None, column of each variable, pixel levels or None) for ``schema``, or
        the error saying why these settings cannot model it (before any work)."""
        if schema.label is not None:
            raise FedpgmError(f"DensePC models the features only; leave the label '{schema.label}' out "
                              "(pc fit drops it for dense learners)")
        found = images.layout(schema)
        levels = images.levels(schema) if found else None
        shape, columns = found if found else (None, list(range(len(schema))))
        inputs = INPUT_LAYERS[self.leaf]
        if inputs.needs_levels and levels is None:
            raise FedpgmError(f"{self.leaf} inputs need pixel values (an image schema with pixel levels)")
        if inputs.needs_binary and not all(f.kind == "binary" for f in schema.features):
            others = " or ".join(k for k, layer in INPUT_LAYERS.items() if not layer.needs_binary)
            raise FedpgmError(f"{self.leaf} inputs need binary columns; use leaf {others}")
        if self.structure != "binary-trees" and shape is None:
            build(self.structure, len(columns))  # (the error naming what an image needs)
        return shape, columns, levels

    def build(self, schema: Schema) -> DenseCircuit:
        """The untrained circuit for ``schema`` (its region graph, inputs and device)."""
        shape, columns, levels = self.check_data(schema)
        graph = build(self.structure, len(columns), shape, self.pieces, self.depth, self.repetitions, self.seed,
                      self.cell)
        # the inputs' options are parameters of the same names here (min_var, max_var); levels: the schema's
        options = {k: getattr(self, k) for k in INPUT_LAYERS[self.leaf].extras if k != "levels"}
        model = DenseCircuit(graph, self.units, self.leaf, levels, options, seed=self.seed)
        model.schema, model.columns = schema, columns
        return model.to(resolve_device(self.device))

    def initialise(self, model: DenseCircuit, data: np.ndarray) -> None:
        """Start the inputs from per-column statistics only, so no unit starts as (and, after few
        EM steps, stays close to) a copy of a training row, which would travel in FedPC messages.

        Gaussian means: each column's mean plus noise of half its standard deviation.
        Categorical inputs: every unit at 0.2 x the column's value frequencies + 0.8 x uniform
        (units are told apart by the random sum weights). Chosen on a validation split of
        mnist5k's training rows (3,500 / 500, Adam, cell 4, K 10, seeds 0 and 1): validation bpd
        1.666 / 1.672 from softmax(standard normal) logits, 1.550 / 1.551 with this start; the
        uniform share 0.5 gave 1.560 / 1.558, 0.95 gave 1.562, 1.0 (no data) 1.616, and noise
        of 0.1 on the logits 1.564 (docs/images.md). With ``min_leaf_rows`` > 1, a column observed
        in fewer rows than that starts with no data (means 0, uniform values)."""
        if len(data) == 0:
            return
        if self.min_leaf_rows > 1:
            data = np.where((~np.isnan(data)).sum(0) >= self.min_leaf_rows, data, np.nan)
        model.inputs.start(data, np.random.default_rng(self.seed))

    # -- queries ------------------------------------------------------------------------------
    def _check(self) -> DenseCircuit:
        if not hasattr(self, "circuit_"):
            raise NotFitted(f"this {type(self).__name__} is not fitted yet; call fit first")
        return self.circuit_

    def _matrix(self, X) -> np.ndarray:
        """(rows, schema columns) query rows; a label column in a frame is ignored."""
        self._check()
        if isinstance(X, pd.DataFrame) and self.schema_.label in X.columns:
            X = X.drop(columns=[self.schema_.label])
        return as_matrix(X, self.schema_)

    def log_likelihood(self, X) -> np.ndarray:
        """(rows,) log p in nats (log P of the pixel values for images); NaN is marginalised."""
        return self._check().log_likelihood(self._matrix(X))

    def score_samples(self, X) -> np.ndarray:
        return self.log_likelihood(X)

    def score(self, X, y=None) -> float:
        return float(self.log_likelihood(X).mean())

    def bits_per_dim(self, X) -> float:
        return images.bits_per_dim(self.log_likelihood(X), len(self._check().columns))

    def conditional(self, X, query: list[str]) -> np.ndarray:
        """(rows,) log p(query columns | the other observed columns)."""
        x = self._matrix(X)
        evidence = x.copy()
        self.schema_.check_names(query)
        evidence[:, [self.schema_.index(q) for q in query]] = np.nan
        return self.circuit_.log_likelihood(x) - self.circuit_.log_likelihood(evidence)

    def complete(self, X, how: Semiring | str = Semiring.SUM, seed: int = 0) -> np.ndarray:
        """(rows, columns in schema order): X with NaN filled by a sample from p(missing | observed)
        (``how="sample"``) or the most probable branch's modes (``"max"``): inpainting."""
        return self._check().complete(self._matrix(X), how, seed)

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """(n, columns in schema order) unconditional samples."""
        return self._check().sample(n, seed)

    def predict_proba(self, X, target: str | None = None):
        raise FedpgmError("a DensePC models pixels only, so it has no label to classify; use learnspn for that")

    def mpe(self, X):
        raise FedpgmError("exact MPE is not available for dense circuits; `pc inpaint --how max` gives the "
                          "most probable branch's completion")

    @property
    def n_params(self) -> int:
        return self._check().n_params

    # -- files --------------------------------------------------------------------------------
    def save(self, folder) -> None:
        save_circuit(self._check(), folder, {"estimator": type(self).__name__, "params": self.get_params()})

    @classmethod
    def from_circuit(cls, circuit: DenseCircuit, meta: dict) -> "DensePC":
        known = cls._get_param_names()
        model = cls(**{k: v for k, v in meta.get("params", {}).items() if k in known})
        if circuit.schema is None:
            raise FedpgmError("this dense circuit names no variables; save it from a fitted DensePC")
        model.circuit_, model.schema_ = circuit.to(resolve_device(model.device)), circuit.schema
        return model

    @classmethod
    def load(cls, folder) -> "DensePC":
        """The ``DensePC`` saved in ``folder`` (``fedpgm.circuits.learners.load_model`` loads any estimator's)."""
        circuit, meta = load_circuit(folder)
        if not circuit.dense:
            raise FedpgmError(f"{folder} holds a node circuit; load it with fedpgm.circuits.learners.load_model")
        return cls.from_circuit(circuit, check_meta(meta, True, str(folder), {cls.__name__: cls}))

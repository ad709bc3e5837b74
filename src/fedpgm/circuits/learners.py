"""The circuit learners by name (``--learner``), and loading any saved single-circuit model.

- ``learnspn``, ``ratspn``: ``fedpgm.circuits.estimator`` (node circuits, exact MPE);
- ``pd``: ``fedpgm.circuits.dense_estimator.DensePC`` (dense circuits: Poon-Domingos, quad-tree or
  RAT-SPN's binary trees as region graphs, trained by EM or Adam; images first).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpgm.circuits import dense_train
from fedpgm.circuits.compiled import CompiledCircuit
from fedpgm.circuits.dense import DenseCircuit
from fedpgm.circuits.dense_estimator import DensePC
from fedpgm.circuits.estimator import CircuitEstimator, LearnSPN, RatSPN
from fedpgm.circuits.io import load_circuit
from fedpgm.circuits.selection import LearnSPNCV
from fedpgm.circuits.queries import log_likelihood
from fedpgm.circuits.structure import Circuit
from fedpgm.errors import FedpgmError

ESTIMATORS = {"learnspn": LearnSPN, "learnspn-cv": LearnSPNCV, "ratspn": RatSPN, "pd": DensePC}
DENSE_LEARNERS = ("pd",)


def load_model(folder: str | Path) -> CircuitEstimator | DensePC:
    """The estimator saved in ``folder`` by ``save`` (``pc fit --out``), ready for queries."""
    circuit, meta = load_circuit(folder)
    if isinstance(circuit, DenseCircuit):
        return DensePC.from_circuit(circuit, meta)
    return CircuitEstimator.from_circuit(circuit, meta)


def log_likelihood_of(circuit: Circuit | DenseCircuit, names: list[str], X: np.ndarray) -> np.ndarray:
    """(rows,) log-likelihoods of either circuit kind for rows X whose columns are ``names``;
    the circuit's variables absent from ``names`` are marginalised."""
    if circuit.schema is None:
        raise FedpgmError("this circuit does not name its variables; fit it on a table with a schema")
    cols = [names.index(n) if n in names else -1 for n in circuit.schema.names]
    local = np.full((len(X), len(cols)), np.nan)
    for j, c in enumerate(cols):
        if c >= 0:
            local[:, j] = X[:, c]
    if isinstance(circuit, DenseCircuit):
        return dense_train.log_likelihood(circuit, local[:, circuit.columns])
    return log_likelihood(CompiledCircuit(circuit), local)

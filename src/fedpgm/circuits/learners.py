"""The circuit learners by name (``--learner``), what callers ask of each, and loading any saved
single-circuit model.

- ``learnspn``, ``learnspn-cv``, ``ratspn``: ``fedpgm.circuits.estimator`` and
  ``fedpgm.circuits.selection`` (node circuits, exact MPE; the label is one of their variables);
- ``pd``: ``fedpgm.circuits.dense_estimator.DensePC`` (dense circuits: Poon-Domingos, quad-tree or
  RAT-SPN's binary trees as region graphs, trained by EM or Adam; images first; the features only).

``learner_spec`` is the one place a learner's name is checked; what a learner is (``dense``,
``takes_label``, ``row_settings``) is said by its estimator class, and its spec reads it there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedpgm.circuits.dense_estimator import DensePC
from fedpgm.circuits.estimator import CircuitEstimator, LearnSPN, LearnSPNMixture, RatSPN
from fedpgm.circuits.io import load_circuit
from fedpgm.circuits.protocol import CircuitModel
from fedpgm.circuits.selection import LearnSPNCV
from fedpgm.errors import FedpgmError


@dataclass(frozen=True)
class LearnerSpec:
    """A learner (``--learner``): its estimator class and what callers ask of it."""

    name: str
    estimator: type[CircuitEstimator] | type[DensePC]

    @property
    def dense(self) -> bool:
        """It learns dense circuits (trained by epochs; their size is ``n_params``)."""
        return self.estimator.dense

    @property
    def takes_label(self) -> bool:
        """It models the label as a variable; else the label is dropped before a fit."""
        return self.estimator.takes_label

    @property
    def row_settings(self) -> tuple[str, ...]:
        """Its parameters counted in rows, which a FedPC client raises to its policy's ``min_rows``."""
        return self.estimator.row_settings

    def settings(self, options: dict[str, Any]) -> dict[str, Any]:
        """Those of ``options`` (parameter name -> value: a command's options) its estimator takes."""
        names = self.estimator._get_param_names()
        return {k: v for k, v in options.items() if k in names}

    def default(self, param: str):
        """The estimator's own default of ``param`` (None where it has no such parameter)."""
        return self.estimator().get_params().get(param)


LEARNERS = {spec.name: spec for spec in (LearnerSpec("learnspn", LearnSPN), LearnerSpec("learnspn-cv", LearnSPNCV),
                                         LearnerSpec("ratspn", RatSPN), LearnerSpec("pd", DensePC))}
# every estimator class a saved model may name (``save`` records the class name)
SAVED_BY: dict[str, Any] = {cls.__name__: cls for cls in (LearnSPN, LearnSPNCV, LearnSPNMixture, RatSPN, DensePC)}


def learner_spec(name: str) -> LearnerSpec:
    """The learner called ``name``; an unknown name is a ``FedpgmError`` listing the learners."""
    if name not in LEARNERS:
        raise FedpgmError(f"unknown learner '{name}'; use one of {sorted(LEARNERS)}")
    return LEARNERS[name]


def load_model(folder: str | Path) -> CircuitEstimator | DensePC:
    """The estimator saved in ``folder`` by ``save`` (``pc fit --out``), ready for queries: of the
    class that saved it, or with no class recorded, LearnSPN's or DensePC's by the circuit's kind."""
    circuit, meta = load_circuit(folder, SAVED_BY)
    cls: Any = SAVED_BY[meta["estimator"]] if meta else DensePC if circuit.dense else LearnSPN
    return cls.from_circuit(circuit, meta)


def log_likelihood_of(circuit: CircuitModel, names: list[str], X: np.ndarray) -> np.ndarray:
    """(rows,) log-likelihoods of a circuit for rows X whose columns are ``names``; the circuit's
    variables absent from ``names`` are marginalised."""
    if circuit.schema is None:
        raise FedpgmError("this circuit does not name its variables; fit it on a table with a schema")
    cols = [names.index(n) if n in names else -1 for n in circuit.schema.names]
    local = np.full((len(X), len(cols)), np.nan)
    for j, c in enumerate(cols):
        if c >= 0:
            local[:, j] = X[:, c]
    return circuit.log_likelihood(local)

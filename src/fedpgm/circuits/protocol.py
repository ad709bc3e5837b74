"""The circuit model protocol: what every circuit answers, a node circuit
(``fedpgm.circuits.structure.Circuit``, queried through its compiled layers) and a dense one
(``fedpgm.circuits.dense.DenseCircuit``) alike, so callers never ask which one they hold.

Rows ``X`` are (rows, ``width``) floats in the circuit's variable order (its schema's, where it
names its variables), NaN for an unobserved value:

- ``log_likelihood(X)`` -> (rows,): log p of each row's observed values; NaN entries are summed
  out, so a row with NaN gives the marginal of the rest;
- ``complete(X, how, seed)`` -> (rows, width): X with its NaN entries filled; ``Semiring.MAX``:
  the most probable explanation (exact for node circuits; for dense ones the most probable
  branch and its leaves' modes, as EiNets inpaint), ``Semiring.SUM`` (or ``"sample"``): a draw
  from p(missing | observed);
- ``sample(n, seed)`` -> (n, width): unconditional draws.

Files: ``format`` names the circuit's file format; ``fedpgm.circuits.io.FORMATS`` (the registry)
writes and reads each format, and ``load_circuit`` dispatches on the format a file records.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from fedpgm.circuits.semiring import Semiring
from fedpgm.data.schema import Schema


@runtime_checkable
class CircuitModel(Protocol):
    """A circuit of either representation (module doc)."""

    format: ClassVar[str]  # its file format, a key of ``fedpgm.circuits.io.FORMATS``

    @property
    def dense(self) -> bool:
        """A dense circuit (trained by epochs, one input kind for every variable), else a node one."""

    @property
    def schema(self) -> Schema | None:
        """The variables it models, by name (None: a dense circuit built without a schema)."""

    @property
    def width(self) -> int:
        """The number of columns of its rows ``X``."""

    def log_likelihood(self, X: np.ndarray) -> np.ndarray:
        """(rows,) log p(observed values of each row)."""

    def complete(self, X: np.ndarray, how: Semiring | str = Semiring.MAX, seed: int = 0) -> np.ndarray:
        """(rows, width) X with its NaN entries filled (MPE under MAX, a draw under SUM)."""

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """(n, width) unconditional draws."""

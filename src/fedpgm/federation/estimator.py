"""scikit-learn's conventions for models fitted across clients: the base of each family's
federated estimator (``fedpgm.fedpc.FederatedPC``, ``fedpgm.ngm.FederatedNGM``).

``fit(federation)`` takes a description of the federation, not a table: a
``fedpgm.data.Partition`` (the clients' data, e.g. ``fedpgm.data.partition(ds, "vertical", 2)``)
or the folder ``fedpgm partition`` / ``Partition.write`` wrote (its ``manifest.json``). The
``backend`` parameter says where the clients run: ``inprocess`` (one worker process per
client), ``flower`` (a SuperLink and one SuperNode per client on 127.0.0.1) or ``simulation``
(Flower's Simulation Runtime). Constructor arguments are stored as given (``clone``,
``get_params``, ``set_params``) and checked at ``fit`` as scikit-learn checks its own
(``_parameter_constraints``); a query before ``fit`` raises ``NotFittedError``. Fitted
attributes end in ``_``: ``model_`` (the family's model), ``info_`` (the fit's communication and
timing), ``schema_``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from numbers import Real
from pathlib import Path
from typing import Any


from fedpgm.data.partition import Partition, read_partition
from fedpgm.errors import FedpgmError
from fedpgm.federation.apps import BACKENDS
from fedpgm.params import CheckedParams, Interval, StrOptions


def as_partition(federation) -> Partition:
    """The ``Partition`` a federation description names (a Partition, or a partition folder)."""
    if isinstance(federation, Partition):
        return federation
    if isinstance(federation, (str, Path)):
        return read_partition(federation)
    raise FedpgmError(f"fit takes a fedpgm.data.Partition or a partition folder (manifest.json), got "
                      f"{type(federation).__name__}; a table goes to the centralized estimators "
                      "(fedpgm.circuits.LearnSPN) or through fedpgm.data.partition first")


class FederatedEstimator(CheckedParams, ABC):
    """Shared ``fit(federation)``, parameter checks and fitted-state checks; a family implements
    ``_fit(partition) -> (model, info)``, ``info`` holding the fit's communication and timing."""

    _fit_params: tuple[str, ...] = ()  # the keyword arguments a family's fit takes besides the federation
    _parameter_constraints: dict = {
        "backend": [StrOptions(set(BACKENDS))],
        "timeout": [Interval(Real, 0, None, closed="neither")],
    }

    def fit(self, federation, y=None, **fit_params) -> "FederatedEstimator":
        """Learn from the clients of ``federation`` (a ``Partition`` or a partition folder); their
        rows never leave them. ``y`` must be None: labels are columns the clients hold.
        ``fit_params`` go to the family's ``_fit`` (e.g. F-CMs' server-side validation rows)."""
        if y is not None:
            raise FedpgmError("a federated fit takes no y: the label is a column the clients hold (name it "
                              "when partitioning, e.g. fedpgm partition --label)")
        unknown = sorted(set(fit_params) - set(self._fit_params))
        if unknown:
            raise FedpgmError(f"{type(self).__name__}.fit takes no {unknown}; its fit arguments are "
                              f"{list(self._fit_params) or 'the federation alone'}")
        self.check_params()
        part = as_partition(federation)
        self.model_, self.info_ = self._fit(part, **fit_params)
        self.schema_ = getattr(self.model_, "schema", None) or part.schema
        return self

    @abstractmethod
    def _fit(self, partition: Partition, **fit_params: Any) -> tuple[Any, dict]:
        """(the family's model, the fit's info), learned across ``partition``'s clients on
        ``self.backend``."""

    def _check(self):
        from fedpgm.circuits.estimator import NotFitted

        if not hasattr(self, "model_"):
            raise NotFitted(f"this {type(self).__name__} is not fitted yet; call fit(federation) first")
        return self.model_

    @property
    def communication_(self) -> dict:
        """Bytes up and down, messages and rounds of the fit."""
        self._check()
        comm = self.info_.get("communication")
        if isinstance(comm, dict):
            return comm
        return {k: v for k, v in self.info_.items() if k.startswith("bytes") or k in ("messages", "rounds")}

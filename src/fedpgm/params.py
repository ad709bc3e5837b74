"""scikit-learn's parameter validation with fedpgm's errors, for every estimator here.

A class lists ``_parameter_constraints`` as scikit-learn's own estimators do; ``check_params()``
validates them (at ``fit``, or earlier: the CLI checks before reading data) and turns
scikit-learn's ``InvalidParameterError`` into a one-line ``FedpgmError`` naming the parameter and
its allowed range; ``set_params`` refuses an unknown name instead of scikit-learn's longer message.
"""

from __future__ import annotations

from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import InvalidParameterError

from fedpgm.errors import FedpgmError


class CheckedParams(BaseEstimator):
    """A ``BaseEstimator`` whose parameters are checked into ``FedpgmError``s."""

    def check_params(self):
        """``self`` when every parameter is within its allowed range, else a ``FedpgmError``.
        Subclasses add cross-parameter checks after ``super().check_params()``."""
        try:
            self._validate_params()
        except InvalidParameterError as e:
            raise FedpgmError(str(e)) from None
        return self

    def set_params(self, **params):
        known = self._get_param_names()
        unknown = [k for k in params if k not in known]
        if unknown:
            raise FedpgmError(f"unknown parameter(s) {unknown}; parameters are {known}")
        return super().set_params(**params)

"""scikit-learn's parameter validation with fedpgm's errors, for every estimator here.

A class lists ``_parameter_constraints`` as scikit-learn's own estimators do; ``check_params()``
validates them (at ``fit``, or earlier: the CLI checks before reading data) and turns
scikit-learn's ``InvalidParameterError`` into a one-line ``FedpgmError`` naming the parameter and
its allowed range; ``set_params`` refuses an unknown name instead of scikit-learn's longer message.

scikit-learn keeps its constraint classes (``Interval``, ``StrOptions``) and
``InvalidParameterError`` in the private ``sklearn.utils._param_validation``; this module is the
one place that imports them (every estimator takes them from here), pyproject.toml pins
scikit-learn to the tested range, and ``tests/test_params.py`` checks the behaviour relied on, so
a scikit-learn that moves them fails one test instead of every estimator.
"""

from __future__ import annotations

from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import (Interval, InvalidParameterError, StrOptions,
                                            validate_parameter_constraints)

__all__ = ["CheckedParams", "Interval", "StrOptions", "check_values"]

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


def check_values(constraints: dict, params: dict, owner: str) -> None:
    """``params`` (a dict of some of ``owner``'s parameters) within ``constraints``, as
    ``check_params`` checks an estimator's own, without building one; else a ``FedpgmError``."""
    unknown = sorted(set(params) - set(constraints))
    if unknown:
        raise FedpgmError(f"unknown parameter(s) {unknown} of {owner}; parameters are {sorted(constraints)}")
    try:
        validate_parameter_constraints({k: constraints[k] for k in params}, params, caller_name=owner)
    except InvalidParameterError as e:
        raise FedpgmError(str(e)) from None

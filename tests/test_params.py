"""What fedpgm relies on in scikit-learn's private parameter validation (``fedpgm.params``): the
pinned scikit-learn range in pyproject.toml is the one these checks pass on."""

from numbers import Integral, Real

import pytest

from fedpgm.errors import FedpgmError
from fedpgm.params import CheckedParams, Interval, StrOptions


class Toy(CheckedParams):
    _parameter_constraints = {"units": [Interval(Integral, 1, None, closed="left")],
                              "rate": [Interval(Real, 0, 1, closed="neither")],
                              "kind": [StrOptions({"a", "b"})]}

    def __init__(self, units: int = 2, rate: float = 0.5, kind: str = "a") -> None:
        self.units, self.rate, self.kind = units, rate, kind


def test_constraints_refuse_out_of_range_values_naming_the_parameter():
    assert Toy().check_params().units == 2
    for params, name in (({"units": 0}, "units"), ({"rate": 1.0}, "rate"), ({"kind": "c"}, "kind"),
                         ({"units": 2.5}, "units")):
        with pytest.raises(FedpgmError, match=f"'{name}' parameter of Toy must be"):
            Toy(**params).check_params()


def test_set_params_refuses_an_unknown_name():
    with pytest.raises(FedpgmError, match=r"unknown parameter\(s\) \['depth'\]"):
        Toy().set_params(depth=3)
    assert Toy().set_params(units=5).units == 5


def test_the_installed_scikit_learn_is_inside_the_pinned_range():
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    from packaging.requirements import Requirement

    deps = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(Requirement(d) for d in deps if d.startswith("scikit-learn"))
    assert pin.specifier and any(s.operator == "<" for s in pin.specifier), pin  # an upper bound
    assert version("scikit-learn") in pin.specifier

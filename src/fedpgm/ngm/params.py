"""``FederatedNGM``'s parameters and their allowed values: one table, read by the estimator
(its ``_parameter_constraints``) and by a model file's check of the parameters it records
(``fedpgm.ngm.files.check_meta``), so that neither imports the other."""

from __future__ import annotations

from numbers import Integral, Real

from fedpgm.federation.estimator import FederatedEstimator
from fedpgm.ngm.graph import GRAPH_METHODS
from fedpgm.params import Interval, StrOptions

ALLOCATIONS = ("proportional", "equal")  # how the server's samples are shared among the client models
PARAMETERS: dict = {
    **FederatedEstimator._parameter_constraints,
    "graph": [StrOptions(set(GRAPH_METHODS))],
    "sparsity": [Interval(Real, 0, 1, closed="right")],
    "min_clients": [Interval(Integral, 1, None, closed="left")],
    "samples": [Interval(Integral, 1, None, closed="left"), None],
    "allocation": [StrOptions(set(ALLOCATIONS))],
    "gibbs_sweeps": [Interval(Integral, 0, None, closed="left")],
    "soft": ["boolean"],
    "secure_aggregation": ["boolean"],
    "hidden": [Interval(Integral, 1, None, closed="left")],
    "layers": [Interval(Integral, 1, None, closed="left")],
    "lam": [Interval(Real, 0, None, closed="left")],
    "lr": [Interval(Real, 0, None, closed="neither")],
    "epochs": [Interval(Integral, 1, None, closed="left")],
    "batch_size": [Interval(Integral, 1, None, closed="left")],
    "patience": [Interval(Integral, 1, None, closed="left")],
    "seed": [Interval(Integral, 0, 2**32 - 1, closed="both")],
}

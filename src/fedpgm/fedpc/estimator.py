"""``FederatedPC``: FedPC (Algorithm 1) as a scikit-learn style estimator.

    from fedpgm.data import load_dataset, partition
    from fedpgm.fedpc import FederatedPC

    ds = load_dataset("breast_cancer")
    model = FederatedPC(clusters=2, glue="combinatorial").fit(partition(ds, "vertical", 2))
    model.score(ds.test), model.predict(ds.test[:5]), model.sample(3)
    model.save("models/cancer"); FederatedPC.load("models/cancer")

``fit`` takes the federation (``fedpgm.federation.estimator``), runs ``fit_fedpc`` on the chosen
backend and keeps the assembled model (``model_``, a ``FedPC``); the queries are the
centralized circuits' (``fedpgm.circuits.LearnSPN``): ``score_samples`` / ``score`` (nats),
``predict_proba``, ``predict`` (category names), ``conditional``, ``mpe``, ``sample``. The model
is assembled at the server (``placement="server"``); to keep each client's circuit at its
client, call ``fit_fedpc(federation, placement="split")`` on an open federation instead.
"""

from __future__ import annotations

from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from fedpgm.params import Interval, StrOptions

from fedpgm.circuits.learners import LEARNERS
from fedpgm.data.partition import Partition
from fedpgm.errors import FedpgmError
from fedpgm.federation.estimator import FederatedEstimator
from fedpgm.fedpc.plan import GLUES
from fedpgm.fedpc.model import FedPC

ESTIMATOR_KEY = "estimator"  # where save() keeps the parameters, in the model's info


class FederatedPC(FederatedEstimator):
    """A federated probabilistic circuit, learned in one pass across the clients.

    Parameters: ``clusters`` per single-client subspace (None: auto, ``fedpgm.fedpc.defaults``),
    ``glue`` (auto: ``fedpgm.fedpc.defaults.glue``; random: Algorithm 1; combinatorial;
    aligned), ``products`` (random gluing), the clients' ``learner`` (learnspn, ratspn, pd) and
    its ``params``, ``backend``, ``timeout`` per exchange (s), ``min_clients`` (horizontal
    quorum), ``align`` (``"psi"``: private set intersection of the parties' row ids first),
    ``smoothing`` (aligned gluing's pseudo-rows per cluster tuple toward the product of the
    clients; None: a weight chosen on held-out tuples), ``refine_passes`` (horizontal: at most
    this many passes of federated EM after the one pass, kept while held-out rows score better,
    ``fedpgm.fedpc.refine``; None: auto; 0: the paper's one pass), ``cluster_fit`` (learn: a
    structure per cluster, the paper's; refit: the client's circuit of all rows refitted by EM on
    each cluster, ``fedpgm.fedpc.defaults.cluster_fit``), ``seed``. ``check_params`` checks them
    all, the learner's own ``params`` included (by building the learner), before any data is read."""

    _parameter_constraints: dict = {
        **FederatedEstimator._parameter_constraints,
        "clusters": [Interval(Integral, 1, None, closed="left"), None],
        "glue": [StrOptions(set(GLUES) | {"auto"})],
        "products": [Interval(Integral, 1, None, closed="left"), None],
        "learner": [StrOptions(set(LEARNERS))],
        "params": [dict, None],
        "min_clients": [Interval(Integral, 1, None, closed="left"), None],
        "align": [StrOptions({"none", "psi"})],
        "smoothing": [Interval(Real, 0, None, closed="left"), None],
        "refine_passes": [Interval(Integral, 0, 10, closed="both"), None],
        "cluster_fit": [StrOptions({"learn", "refit"})],
        "seed": [Interval(Integral, 0, 2**32 - 1, closed="both")],
    }

    def __init__(self, clusters: int | None = None, glue: str = "auto", products: int | None = None,
                 learner: str = "learnspn", params: dict | None = None, backend: str = "inprocess",
                 timeout: float = 3600.0, min_clients: int | None = None, align: str = "none",
                 smoothing: float | None = None, refine_passes: int | None = None, cluster_fit: str = "learn",
                 seed: int = 0) -> None:
        self.clusters = clusters
        self.glue = glue
        self.products = products
        self.learner = learner
        self.params = params
        self.backend = backend
        self.timeout = timeout
        self.min_clients = min_clients
        self.align = align
        self.smoothing = smoothing
        self.refine_passes = refine_passes
        self.cluster_fit = cluster_fit
        self.seed = seed

    def fit_args(self) -> dict:
        """``fit_fedpc``'s keyword arguments (the model assembled at the server)."""
        return {"clusters": self.clusters, "glue_how": self.glue, "products": self.products,
                "learner": self.learner, "params": dict(self.params or {}), "placement": "server",
                "seed": self.seed, "min_clients": self.min_clients, "align": self.align,
                "smoothing": self.smoothing, "refine_passes": self.refine_passes, "cluster_fit": self.cluster_fit}

    def check_params(self) -> "FederatedPC":
        """The parameters' ranges, then the learner's ``params`` (``learner_params``) and the
        quorum's company: a one-line ``FedpgmError`` for the first that does not hold."""
        from fedpgm.fedpc.server import learner_params

        super().check_params()
        learner_params(self.learner, self.params, self.seed)
        if self.align == "psi" and self.min_clients is not None:
            raise FedpgmError("min_clients and PSI alignment do not mix: aligned rows need every party")
        return self

    def _fit(self, partition: Partition, **fit_params: Any) -> tuple[FedPC, dict]:
        from fedpgm.fedpc.procedure import fit_on

        _, model = fit_on(partition, self.fit_args(), self.backend, self.timeout, FedPC)
        return model, model.info

    # -- queries (X: a DataFrame with the schema's names, or an array in schema order) ----------
    def score_samples(self, X) -> np.ndarray:
        """(rows,) log-likelihood in nats; NaN or absent columns are marginalised."""
        return self._check().log_likelihood(X)

    def score(self, X, y=None) -> float:
        """Mean log-likelihood per row (nats)."""
        return float(self.score_samples(X).mean())

    def predict_proba(self, X, target: str | None = None) -> np.ndarray:
        """(rows, categories of target) p(target | the other observed columns); default: the label."""
        return self._check().predict_proba(X, target)

    def predict(self, X, target: str | None = None) -> np.ndarray:
        """(rows,) the most probable category name of ``target`` (default: the label)."""
        model = self._check()
        name = target or model.schema.label
        best = self.predict_proba(X, target).argmax(axis=1)
        return np.asarray(model.schema[name].categories, dtype=object)[best]

    def conditional(self, X, query: list[str]) -> np.ndarray:
        """(rows,) log p(query columns | the other observed columns)."""
        return self._check().conditional(X, query)

    def mpe(self, X):
        """X with its missing values filled by the most probable explanation; a DataFrame in,
        a DataFrame out (the schema's column names and X's index), else an array in schema order."""
        model = self._check()
        filled = model.mpe(X)
        return pd.DataFrame(filled, columns=model.schema.names, index=X.index) if isinstance(X, pd.DataFrame) \
            else filled

    def sample(self, n: int, seed: int = 0) -> pd.DataFrame:
        """(n rows, the schema's columns) drawn from the model (codes, as the clients' tables)."""
        model = self._check()
        return pd.DataFrame(model.sample(n, seed=seed), columns=model.schema.names)

    # -- files ----------------------------------------------------------------------------------
    def save(self, folder) -> Path:
        """The model (``fedpc.json`` + its circuit, safetensors) with these parameters, atomically."""
        model = self._check()
        model.info = {**model.info, ESTIMATOR_KEY: self.get_params()}
        return model.save(folder)

    @classmethod
    def load(cls, folder) -> "FederatedPC":
        """The estimator ``save`` wrote (or any ``fedpgm fedpc fit --out`` folder), fitted."""
        model = FedPC.load(folder)
        params = model.info.get(ESTIMATOR_KEY, {})
        if not isinstance(params, dict) or set(params) - set(cls._get_param_names()):
            raise FedpgmError(f"{folder}: fedpc.json's estimator parameters {params!r} are not FederatedPC's; "
                              "pass a folder written by FederatedPC.save or fedpgm fedpc fit")
        estimator = cls(**params)
        estimator.model_, estimator.info_, estimator.schema_ = model, model.info, model.schema
        return estimator

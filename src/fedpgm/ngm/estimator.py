"""``FederatedNGM``: FedNGM as a scikit-learn style estimator.

    from fedpgm.data import load_dataset, partition
    from fedpgm.ngm import FederatedNGM

    ds = load_dataset("breast_cancer")
    model = FederatedNGM(epochs=60, min_clients=2).fit(partition(ds, "horizontal", 2))
    model.predict(ds.test[:5], "target"), model.score(ds.test, "mean_radius"), model.sample(100)
    model.save("models/cancer-ngm"); FederatedNGM.load("models/cancer-ngm")

``fit`` takes the federation (``fedpgm.federation.estimator``) and runs ``fit_fedngm``: client
graphs merged at the server, one NGM per client, the global NGM distilled from their samples
(``model_``) and released only when ``min_clients`` or more contributed (else a one-line
error naming the refusal). Queries take any subset of the model's columns (NaN = unknown):
``predict`` (category names for discrete targets, values for numeric ones), ``predict_proba``,
``score`` (accuracy or R^2, as scikit-learn's classifiers and regressors), ``sample``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import accuracy_score, r2_score

from fedpgm.data.partition import Partition
from fedpgm.errors import FedpgmError
from fedpgm.federation.estimator import FederatedEstimator
from fedpgm.ngm.defaults import SOFT_TARGETS
from fedpgm.ngm.layout import numeric
from fedpgm.ngm.model import NGM
from fedpgm.ngm.params import PARAMETERS

NGM_PARAMS = ("hidden", "layers", "lam", "lr", "epochs", "batch_size", "patience")  # NGMSettings'


class FederatedNGM(FederatedEstimator):
    """A federated neural graphical model over the features the clients share.

    Parameters: ``graph`` recovery at each client (glasso, bn, ngr) and ``sparsity``;
    ``min_clients``, the release threshold T; ``samples`` the server draws (default: the
    clients' rows times ``fedpgm.ngm.defaults.SAMPLES_FACTOR``), their ``allocation`` over
    clients, ``gibbs_sweeps`` and ``soft`` targets; ``secure_aggregation`` of the graph votes
    (SecAgg+); the NGM's ``hidden``, ``layers``, ``lam``, ``lr``, ``epochs``, ``batch_size``,
    ``patience``; ``backend``, ``timeout`` (s per exchange), ``seed``."""

    _parameter_constraints: dict = PARAMETERS

    def __init__(self, graph: str = "glasso", sparsity: float = 0.25, min_clients: int = 1,
                 samples: int | None = None, allocation: str = "proportional", gibbs_sweeps: int = 0,
                 soft: bool = SOFT_TARGETS, secure_aggregation: bool = False, hidden: int = 64, layers: int = 2,
                 lam: float = 0.1, lr: float = 2e-3, epochs: int = 200, batch_size: int = 256, patience: int = 10,
                 backend: str = "inprocess", timeout: float = 3600.0, seed: int = 0) -> None:
        self.graph = graph
        self.sparsity = sparsity
        self.min_clients = min_clients
        self.samples = samples
        self.allocation = allocation
        self.gibbs_sweeps = gibbs_sweeps
        self.soft = soft
        self.secure_aggregation = secure_aggregation
        self.hidden = hidden
        self.layers = layers
        self.lam = lam
        self.lr = lr
        self.epochs = epochs
        self.batch_size = batch_size
        self.patience = patience
        self.backend = backend
        self.timeout = timeout
        self.seed = seed

    def fit_args(self) -> dict:
        """``fit_fedngm``'s keywords (the NGM settings as a dict under ``"ngm"``)."""
        ngm = {k: getattr(self, k) for k in NGM_PARAMS} | {"seed": self.seed, "revealer": self.graph == "ngr",
                                                           "sparsity": self.sparsity}
        return {"graph_method": self.graph, "sparsity": self.sparsity, "min_clients": self.min_clients,
                "samples": self.samples, "allocation": self.allocation, "seed": self.seed,
                "sweeps": self.gibbs_sweeps, "soft": self.soft, "secure_aggregation": self.secure_aggregation,
                "ngm": ngm}

    def _fit(self, partition: Partition, **fit_params: Any) -> tuple[NGM, dict]:
        from fedpgm.federation.lifecycle import private_tempdir
        from fedpgm.federation.runner import run

        with private_tempdir("fedpgm-ngm-") as tmp:
            out = run(partition, "ngm", "ngm", {"settings": self.fit_args(), "out": str(tmp / "model")},
                      backend=self.backend, timeout=self.timeout)
            if not out["released"]:
                raise FedpgmError(f"no global NGM: {out['refusal']}")
            return NGM.load(tmp / "model"), {**out["info"], "communication": out["communication"]}

    # -- queries (X: a DataFrame holding any subset of the model's columns, NaN = unknown) ------
    def predict_proba(self, X: pd.DataFrame, target: str) -> np.ndarray:
        """(rows, categories) P(target | the other given columns) for a discrete ``target``."""
        model = self._check()
        if target in model.schema and numeric(model.schema[target]):
            raise FedpgmError(f"'{target}' is numeric: predict() gives its expected value")
        return model.predict(X, target)

    def predict(self, X: pd.DataFrame, target: str) -> np.ndarray:
        """(rows,) the most probable category name of a discrete ``target``, or E[target] of a
        numeric one, given the other columns of X."""
        model = self._check()
        out = model.predict(X, target)
        f = model.schema[target]
        return out if numeric(f) else np.asarray(f.categories, dtype=object)[out.argmax(axis=1)]

    def score(self, X: pd.DataFrame, target: str) -> float:
        """Accuracy (discrete ``target``) or R^2 (numeric) of ``predict`` against X's own
        ``target`` column (rows where it is missing are left out)."""
        model = self._check()
        f = model.schema[target] if target in model.schema else None
        if f is None or target not in X:
            raise FedpgmError(f"score needs the true '{target}' in X and in the model ({model.names})")
        known = X[target].notna().to_numpy()
        guess = self.predict(X[known], target)
        truth = X.loc[known, target].to_numpy()
        if numeric(f):
            return float(r2_score(truth, guess))
        return float(accuracy_score(np.asarray(f.categories, dtype=object)[truth.astype(int)], guess))

    def sample(self, n: int, seed: int = 0) -> pd.DataFrame:
        """(n rows, the model's columns) drawn from the global NGM (codes for discrete columns)."""
        return self._check().sample(n, seed=seed, sweeps=self.gibbs_sweeps)

    # -- files ----------------------------------------------------------------------------------
    def save(self, folder) -> Path:
        """The global NGM (``model.json`` + ``weights.safetensors``) with these parameters, atomically."""
        return self._check().save(folder, meta={"estimator": self.get_params(), "info": self.info_})

    @classmethod
    def load(cls, folder) -> "FederatedNGM":
        """The estimator ``save`` wrote (or any ``fedpgm ngm fit --out`` folder), fitted."""
        model = NGM.load(folder)
        params = model.meta.get("estimator", {})
        if not isinstance(params, dict) or set(params) - set(cls._get_param_names()):
            raise FedpgmError(f"{folder}: the saved estimator parameters {params!r} are not FederatedNGM's; "
                              "pass a folder written by FederatedNGM.save or fedpgm ngm fit")
        estimator = cls(**params)
        info = model.meta.get("info")
        estimator.model_, estimator.schema_ = model, model.schema
        estimator.info_ = info if isinstance(info, dict) else {}
        return estimator

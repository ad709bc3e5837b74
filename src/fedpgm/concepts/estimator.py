"""``FederatedCM``: a federated concept-based model (F-CM) as a scikit-learn style estimator.

    from fedpgm.concepts import FederatedCM

    model = FederatedCM(kind="cgm", task="dysp", rounds=50).fit(partition, validation=val_rows,
                                                                late=["client-3", "client-4"])
    model.predict(rows), model.predict_concepts(rows), model.score(rows)
    model.predict(rows, interventions=true_concepts)   # test-time interventions
    model.save("models/asia-cgm"); FederatedCM.load("models/asia-cgm")

``fit`` takes the federation (``fedpgm.federation.estimator``): each client's table holds input
columns ``input:0, input:1, ...`` and the concepts (and the task) it labels, and its concept graph
as an edge list in its ``meta["concept_graph"]`` (``fedpgm.concepts.federation``); clients named
in ``late`` join at ``join_round``, the concept set and graph growing with them. ``validation``
(rows with the input columns and the task, held by the server) drives early stopping. The
rounds are ``run_rounds``'s: graph aggregation, module-wise FedAvg, optional DP-SGD and SecAgg+.
"""

from __future__ import annotations

from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from fedpgm.params import Interval, StrOptions

from fedpgm.concepts.federation import (GRAPH_ROUNDS, GRAPH_VOTES, X_PREFIX, RoundSettings, split_table)
from fedpgm.concepts.models import KINDS, ConceptModel, load_model, save_model
from fedpgm.concepts.privacy import DP_SCOPES
from fedpgm.concepts.train import TrainSettings
from fedpgm.data.partition import Partition
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.estimator import FederatedEstimator

TRAIN_PARAMS = ("epochs", "lr", "batch_size", "gamma", "p_int")  # TrainSettings'


class FederatedCM(FederatedEstimator):
    """A concept model (``kind``: cbm, cem, cgm, c2bm, opaque) trained across the clients.

    Parameters: the federated ``regime`` (fcm: the architecture adapts as clients join; static;
    reinit), the ``task`` node (default: the partition's label), ``rounds``, clients
    ``per_round``, ``join_round``, early-stopping ``patience``, local training (``epochs``,
    ``lr``, ``batch_size``, ``gamma``, ``p_int``), ``hidden`` and ``emb`` sizes, DP-SGD
    (``dp_epsilon``, ``dp_scope``), ``min_clients`` per round, ``secure_aggregation``
    (Flower backend), the graph protocol (``graph_rounds``, ``graph_votes``), ``backend``,
    ``timeout``, ``seed``."""

    _parameter_constraints: dict = {
        **FederatedEstimator._parameter_constraints,
        "kind": [StrOptions(set(KINDS))],
        "regime": [StrOptions({"fcm", "static", "reinit"})],
        "task": [str, None],
        "rounds": [Interval(Integral, 1, None, closed="left")],
        "per_round": [Interval(Integral, 1, None, closed="left")],
        "join_round": [Interval(Integral, 1, None, closed="left")],
        "patience": [Interval(Integral, 1, None, closed="left")],
        "epochs": [Interval(Integral, 1, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "gamma": [Interval(Real, 0, 1, closed="both")],
        "p_int": [Interval(Real, 0, 1, closed="both")],
        "hidden": [Interval(Integral, 1, None, closed="left")],
        "emb": [Interval(Integral, 1, None, closed="left")],
        "dp_epsilon": [Interval(Real, 0, None, closed="neither"), None],
        "dp_scope": [StrOptions(set(DP_SCOPES))],
        "min_clients": [Interval(Integral, 1, None, closed="left"), None],
        "secure_aggregation": ["boolean"],
        "graph_rounds": [StrOptions(set(GRAPH_ROUNDS))],
        "graph_votes": [StrOptions(set(GRAPH_VOTES))],
        "seed": [Interval(Integral, 0, 2**32 - 1, closed="both")],
    }

    def __init__(self, kind: str = "cgm", regime: str = "fcm", task: str | None = None, rounds: int = 200,
                 per_round: int = 10, join_round: int = 10, patience: int = 10, epochs: int = 2, lr: float = 1e-3,
                 batch_size: int = 512, gamma: float = 0.8, p_int: float = 0.25, hidden: int = 64, emb: int = 16,
                 dp_epsilon: float | None = None, dp_scope: str = "training", min_clients: int | None = None,
                 secure_aggregation: bool = False, graph_rounds: str = "join", graph_votes: str = "adjacency",
                 backend: str = "inprocess", timeout: float = 3600.0, seed: int = 0) -> None:
        self.kind = kind
        self.regime = regime
        self.task = task
        self.rounds = rounds
        self.per_round = per_round
        self.join_round = join_round
        self.patience = patience
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.gamma = gamma
        self.p_int = p_int
        self.hidden = hidden
        self.emb = emb
        self.dp_epsilon = dp_epsilon
        self.dp_scope = dp_scope
        self.min_clients = min_clients
        self.secure_aggregation = secure_aggregation
        self.graph_rounds = graph_rounds
        self.graph_votes = graph_votes
        self.backend = backend
        self.timeout = timeout
        self.seed = seed

    def round_settings(self) -> RoundSettings:
        """These parameters as ``run_rounds``'s settings."""
        return RoundSettings(kind=self.kind, regime=self.regime, rounds=self.rounds, per_round=self.per_round,
                             join_round=self.join_round, patience=self.patience,
                             train=TrainSettings(**{k: getattr(self, k) for k in TRAIN_PARAMS}, seed=self.seed),
                             hidden=self.hidden, emb=self.emb, seed=self.seed, dp_epsilon=self.dp_epsilon,
                             dp_scope=self.dp_scope, min_clients=self.min_clients,
                             secure_aggregation=self.secure_aggregation, graph_rounds=self.graph_rounds,
                             graph_votes=self.graph_votes)

    _fit_params = ("validation", "late")

    def _fit(self, partition: Partition, **fit_params: Any) -> tuple[ConceptModel, dict]:
        """``fit_params``: ``validation`` rows (required) and the ``late`` client ids."""
        validation: pd.DataFrame | None = fit_params.get("validation")
        late: list[str] = list(fit_params.get("late", ()))
        schema = partition.schema
        task = self.task or schema.label
        if task is None or task not in schema:
            raise FedpgmError(f"name the task node (task=...); the clients' columns are {schema.names}")
        ids = [c.client_id for c in partition.clients]
        unknown = [c for c in late if c not in ids]
        if unknown:
            raise FedpgmError(f"late clients {unknown} are not in the federation; its clients are {ids}")
        if validation is None:
            raise FedpgmError("fit needs validation= rows (the input columns and the task) for early stopping")
        inputs = [n for n in schema.names if n.startswith(X_PREFIX)]
        missing = [n for n in inputs + [task] if n not in validation]
        if missing:
            raise FedpgmError(f"validation rows lack {missing}")
        initial = [c for c in ids if c not in late]
        cards = {f.name: f.cardinality for f in schema.features if not f.name.startswith(X_PREFIX)}
        val = (np.array(validation[inputs], dtype=np.float32), np.array(validation[task], dtype=np.int64))
        s = self.round_settings().check(self.backend)
        from fedpgm.concepts.experiment import run_federated

        out = run_federated(partition.clients, initial, list(late), cards, task, len(inputs), val, s, self.timeout,
                            self.backend, partition.dataset)
        info = {"communication": out["communication"], "rounds": len(out["history"]),
                "val_task_loss": [h["val_task_loss"] for h in out["history"]], "joins": out["joins"],
                "left_out": out.get("left_out", {}), "epsilon_spent": out.get("epsilon_spent", {}),
                "categories": {f.name: list(f.states) for f in schema.features if f.name in cards},
                "inputs": inputs}
        self.schema_ = schema
        return out["model"], info

    # -- queries (X: rows with the input columns; interventions: true concept codes, NaN unknown) --
    def _logits(self, X: pd.DataFrame, interventions: pd.DataFrame | None = None) -> dict[str, torch.Tensor]:
        model = self._check()
        inputs = self.info_["inputs"]
        missing = [n for n in inputs if n not in X]
        if missing:
            raise FedpgmError(f"X lacks the input column(s) {missing[:5]}")
        x = torch.as_tensor(np.array(X[inputs], dtype=np.float32))
        model.eval()
        with torch.no_grad():
            if interventions is None:
                return model(x)
            unknown = [c for c in interventions if c not in model.concepts]
            if unknown:
                raise FedpgmError(f"cannot intervene on {unknown}: the model's concepts are {model.concepts}")
            _, codes, nodes = split_table(interventions)
            truth = torch.as_tensor(codes, dtype=torch.long)
            return model(x, truth, truth >= 0, nodes)

    def predict_proba(self, X: pd.DataFrame, interventions: pd.DataFrame | None = None) -> np.ndarray:
        """(rows, task categories) P(task | inputs), with ``interventions`` (true concept codes,
        NaN where unknown) replacing the predicted concepts downstream."""
        return torch.softmax(self._logits(X, interventions)[self._check().task], dim=1).numpy()

    def predict(self, X: pd.DataFrame, interventions: pd.DataFrame | None = None) -> np.ndarray:
        """(rows,) the most probable task category name."""
        task = self._check().task
        names = np.asarray(self.info_["categories"][task], dtype=object)
        return names[self.predict_proba(X, interventions).argmax(axis=1)]

    def predict_concepts(self, X: pd.DataFrame) -> pd.DataFrame:
        """(rows, the model's concepts) the most probable category name of each concept."""
        logits = self._logits(X)
        cats = self.info_["categories"]
        return pd.DataFrame({n: np.asarray(cats[n], dtype=object)[logits[n].argmax(1).numpy()]
                             for n in self._check().concepts}, index=X.index)

    def score(self, X: pd.DataFrame, y=None) -> float:
        """Task accuracy against X's own task column (codes)."""
        task = self._check().task
        if task not in X:
            raise FedpgmError(f"score needs the true task '{task}' in X")
        truth = np.asarray(self.info_["categories"][task], dtype=object)[X[task].to_numpy().astype(int)]
        return float((self.predict(X) == truth).mean())

    # -- files ----------------------------------------------------------------------------------
    def save(self, folder) -> Path:
        """``model.json`` (architecture, parameters, categories) + ``weights.safetensors``, atomically."""
        model = self._check()
        return save_model(model, folder, {"estimator": self.get_params(), "info": self.info_,
                                          "schema": self.schema_.to_dict()})

    @classmethod
    def load(cls, folder) -> "FederatedCM":
        """The estimator ``save`` wrote, fitted."""
        model, meta = load_model(folder)
        params, info = meta.get("estimator"), meta.get("info")
        if not isinstance(params, dict) or not isinstance(info, dict) or set(params) - set(cls._get_param_names()):
            raise FedpgmError(f"{folder} holds no FederatedCM (no estimator parameters); pass a folder written "
                              "by FederatedCM.save")
        estimator = cls(**params)
        estimator.model_, estimator.info_ = model, info
        estimator.schema_ = Schema.from_dict(meta["schema"])
        return estimator

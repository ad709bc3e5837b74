"""Estimates on real data (the paper leaves them to future work): each agent's log-loss on
held-out rows under CL/CI, CL/DI and DL/DI, with bootstrap confidence intervals.

The table is split vertically (every agent also sees the label, as in the paper). CL/CI: a
circuit learned on all features and the label, scoring -log p(y | x). CL/DI: the *same* joint
circuit with the other agents' features marginalised, -log p(y | x_k): exact, because
circuits marginalise exactly. DL/DI: a circuit learned on the agent's own columns and the label,
-log p(y | x_k). Costs per agent are paired differences of per-row losses, so their intervals
come from the same bootstrap resamples of the test rows. (DL/CI needs an agent's model to use
features it never trained on, so it has no plug-in estimate here.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpgm.circuits.estimator import LearnSPN
from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError


def row_log_loss(model: LearnSPN, frame, label: str) -> np.ndarray:
    """(rows,) -log p(label | the frame's other columns) in nats."""
    proba = model.predict_proba(frame.drop(columns=[label]), label)
    y = frame[label].to_numpy().astype(int)
    return -np.log(np.clip(proba[np.arange(len(y)), y], 1e-300, None))


def bootstrap(values: np.ndarray, rounds: int, rng) -> list[float]:
    idx = rng.integers(0, len(values), size=(rounds, len(values)))
    means = values[idx].mean(axis=1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def estimate(dataset: str, clients: int = 2, seed: int = 0, min_instances: int = 200,
             threshold: float = 0.3, leaf: str = "histogram", rounds: int = 1000, data_dir=None) -> dict:
    ds = load_dataset(dataset, seed=seed, data_dir=data_dir)
    label = ds.schema.label
    if label is None or not ds.schema[label].discrete:
        raise FedpgmError(f"dataset '{dataset}' needs a discrete label to estimate predictive losses")
    part = partition(ds, "vertical", clients, seed, label_to="all")
    rng = np.random.default_rng(seed)
    joint = LearnSPN(min_instances, threshold, leaf, seed=seed).fit(ds.train, ds.schema)
    full = row_log_loss(joint, ds.test, label)
    out: dict[str, Any] = {"dataset": ds.name, "clients": clients, "seed": seed, "n_train": len(ds.train),
           "n_test": len(ds.test), "learner": joint.get_params(), "bootstrap_rounds": rounds,
           "CL/CI": {"log_loss_nats": float(full.mean()), "ci95": bootstrap(full, rounds, rng)},
           "agents": {}}
    for c in part.clients:
        own = LearnSPN(min_instances, threshold, leaf, seed=seed).fit(c.train, c.schema)
        test = c.test
        local = row_log_loss(own, test, label)
        shared = row_log_loss(joint, test, label)  # other features absent: marginalised
        agent: dict[str, Any] = {"columns": [n for n in c.columns if n != label]}
        for name, values in (("CL/DI", shared), ("DL/DI", local), ("CL/DI-CL/CI", shared - full),
                             ("DL/DI-CL/CI", local - full), ("DL/DI-CL/DI", local - shared)):
            agent[name] = {"nats": float(values.mean()), "ci95": bootstrap(values, rounds, rng)}
        out["agents"][c.client_id] = agent
    return out

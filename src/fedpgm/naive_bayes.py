"""Federated Gaussian naive Bayes: the worked example of docs/extending.md, a whole family.

Horizontal clients hold the same columns and a label. Each sends, per class, its row count and
the sums and sums of squares of its continuous columns (never a row); the server adds them up
and has the exact pooled class priors, means and variances, i.e. scikit-learn's
``GaussianNB`` fitted on the pooled table. A class with fewer rows at a client than the
client's own ``policy.min_rows`` is not sent (its sums would reveal those rows).

The parts every family has: a client ``HandlerSet`` and a server procedure that takes any
federation (both registered in ``fedpgm.federation.apps``, so that SuperNodes may serve them),
an estimator that runs them on any backend (``fedpgm.federation.runner``), a report, and a
command (``fedpgm federation naive-bayes``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpgm.data.partition import Partition, read_partition
from fedpgm.errors import FedpgmError
from fedpgm.federation.base import DEFAULT_TIMEOUT_S, Federation
from fedpgm.federation.estimator import FederatedEstimator
from fedpgm.federation.runner import run
from fedpgm.federation.codec import Message
from fedpgm.data.policy import PolicyRefusal
from fedpgm.federation.contract import Column, Columns, Contract
from fedpgm.federation.handlers import ClientContext, HandlerSet

HANDLERS = HandlerSet("naive_bayes")
VAR_SMOOTHING = 1e-9  # scikit-learn's GaussianNB default: times the largest column variance, added


# -- client side: runs where the data is; answers with statistics only --------------------------
@HANDLERS.query("class_sums", Contract({"label": Column(), "columns": Columns()}, required=("label", "columns")))
def class_sums(request: Message, ctx: ClientContext) -> Message:
    """Per class: rows, and per column the non-missing rows, sums and sums of squares, for classes
    with ``min_rows`` or more rows. The rows are fixed (every labelled row; a column's sums skip
    its missing values), so no choice of columns selects a different set of rows."""
    label, columns = request.config["label"], list(request.config["columns"])
    if label != ctx.data.schema.label:
        raise PolicyRefusal(f"client '{ctx.client_id}' sends class sums only by its own label "
                            f"'{ctx.data.schema.label}', not '{label}'")
    table = ctx.data.train.dropna(subset=[label])
    y, x = table[label].to_numpy(dtype=int), table[columns].to_numpy(dtype=float)
    seen, x = ~np.isnan(x), np.nan_to_num(x)
    classes = [c for c in np.unique(y) if (y == c).sum() >= ctx.policy.min_rows]  # own policy decides
    if not classes:
        raise FedpgmError(f"no class has {ctx.policy.min_rows} rows here; nothing can be sent")
    return Message("class_sums", {"classes": np.array(classes), "n": np.array([(y == c).sum() for c in classes]),
                                  "count": np.stack([seen[y == c].sum(axis=0) for c in classes]),
                                  "sum": np.stack([x[y == c].sum(axis=0) for c in classes]),
                                  "sumsq": np.stack([(x[y == c] ** 2).sum(axis=0) for c in classes])})


# -- server side: any federation (in-process workers, Flower) -----------------------------------
def fit_naive_bayes(fed: Federation, label: str, columns: list[str], n_classes: int) -> dict:
    """Pooled class priors, means and variances from every client's class sums."""
    replies = fed.broadcast("class_sums", config={"label": label, "columns": columns}).require_all()
    n = np.zeros(n_classes)
    count, total, squares = (np.zeros((n_classes, len(columns))) for _ in range(3))
    for m in replies.values():
        k = m["classes"].astype(int)
        n[k] += m["n"]
        count[k] += m["count"]
        total[k] += m["sum"]
        squares[k] += m["sumsq"]
    if (n == 0).any() or (count == 0).any():
        missing = np.flatnonzero((n == 0) | (count == 0).any(axis=1)).tolist()
        raise FedpgmError(f"classes {missing} reached the server from no client (or with a column never observed)")
    mean = total / count
    var = squares / count - mean**2  # (classes, columns), the pooled maximum-likelihood variance
    overall = squares.sum(axis=0) / count.sum(axis=0) - (total.sum(axis=0) / count.sum(axis=0)) ** 2  # (columns,)
    var += VAR_SMOOTHING * overall.max()
    return {"label": label, "columns": columns, "prior": (n / n.sum()).tolist(), "mean": mean.tolist(),
            "var": var.tolist(), "n": n.astype(int).tolist(), "communication": fed.ledger.totals()}


def predict_proba(model: dict, X) -> np.ndarray:
    """(rows, classes) p(class | the model's columns of X)."""
    x = np.asarray(X[model["columns"]], dtype=float)[:, None, :]  # (rows, 1, columns)
    mean, var = np.asarray(model["mean"]), np.asarray(model["var"])
    log_joint = np.log(model["prior"]) - 0.5 * (np.log(2 * np.pi * var) + (x - mean) ** 2 / var).sum(axis=2)
    log_joint -= log_joint.max(axis=1, keepdims=True)
    p = np.exp(log_joint)
    return p / p.sum(axis=1, keepdims=True)


# -- the estimator: the family's one front door (scikit-learn's conventions, any backend) --------
class FederatedNaiveBayes(FederatedEstimator):
    """Gaussian naive Bayes across a horizontal federation's clients (``fit(partition)``), on
    ``backend`` (``fedpgm.federation.runner``); ``model_``: priors, means and variances."""

    def __init__(self, backend: str = "inprocess", timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.backend = backend
        self.timeout = timeout

    def _fit(self, partition: Partition, **fit_params: Any) -> tuple[dict, dict]:
        label = partition.schema.label
        if partition.split != "horizontal" or label is None:
            raise FedpgmError("naive Bayes needs a horizontal partition with a label (fedpgm partition --split "
                              "horizontal on a labelled dataset)")
        columns = [f.name for f in partition.schema.features if f.kind == "continuous"]
        args = {"label": label, "columns": columns, "n_classes": partition.schema[label].cardinality}
        model = run(partition, "naive_bayes", "naive_bayes", args, backend=self.backend, timeout=self.timeout)
        return model, {"communication": model.pop("communication")}

    def predict_proba(self, X) -> np.ndarray:
        """(rows, classes) p(class | the model's columns of X)."""
        return predict_proba(self._check(), X)


# -- the run a command reports: partition folder -> fit on a backend -> metrics ----------------
def fit_report(partition_dir, backend: str = "inprocess") -> dict:
    """Fit across the clients of ``partition_dir`` on ``backend``; the accuracy on the clients'
    test files. Returns the flat result a report is made of (``fedpgm.report``)."""
    import pandas as pd

    estimator = FederatedNaiveBayes(backend).check_params()
    part = read_partition(partition_dir)
    model = estimator.fit(part).model_
    result = {"dataset": part.dataset, "n_train": int(sum(model["n"])), "communication": estimator.communication_,
              "model": model}
    tests = [c.test for c in part.clients if c.test is not None]
    if tests:  # (the operator of a loopback deployment holds every client's files)
        test = pd.concat(tests)
        result["accuracy"] = float((estimator.predict_proba(test).argmax(axis=1) == test[part.schema.label]).mean())
        result["n_test"] = len(test)
    return result

"""How well a model predicts one target with every other feature observed.

numeric target: MAE and RMSE in the target's units; binary: ROC-AUC and AUPR of the positive
class; multiclass: micro and macro precision and recall of the most probable class. Each has
one ``primary`` metric (MAE, AUC, micro precision) and whether higher is better.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import average_precision_score, precision_score, recall_score, roc_auc_score

PRIMARY = {"numeric": ("mae", False), "binary": ("auc", True), "multiclass": ("precision_micro", True)}


def target_kind(model, target: str) -> str:
    f = model.schema[target]
    if f.kind in ("continuous", "ordinal"):
        return "numeric"
    return "binary" if f.cardinality == 2 else "multiclass"


def target_metrics(model, frame: pd.DataFrame, target: str, mode: str = "direct") -> dict:
    """Metrics of ``model.predict`` on the rows of ``frame`` where ``target`` is known."""
    rows = frame[frame[target].notna()]
    truth = rows[target].to_numpy(dtype=float)
    evidence = rows[[c for c in rows.columns if c in model.schema and c != target]]
    pred = model.predict(evidence, target, mode=mode)
    kind = target_kind(model, target)
    out: dict[str, Any]
    if kind == "numeric":
        err = pred - truth
        out = {"mae": float(np.abs(err).mean()), "rmse": float(np.sqrt((err ** 2).mean()))}
    elif kind == "binary":
        y = truth.astype(int)
        both = len(np.unique(y)) == 2
        out = {"auc": float(roc_auc_score(y, pred[:, 1])) if both else float("nan"),
               "aupr": float(average_precision_score(y, pred[:, 1])) if both else float("nan")}
    else:
        y, yhat = truth.astype(int), pred.argmax(axis=1)
        out = {f"{m}_{avg}": float(fn(y, yhat, average=avg, zero_division=0))
               for m, fn in (("precision", precision_score), ("recall", recall_score))
               for avg in ("micro", "macro")}
    name, higher = PRIMARY[kind]
    out.update({"kind": kind, "primary": name, "higher_is_better": higher, "rows": int(len(rows))})
    return out

"""Classification figures every command reports beside log-likelihoods (scikit-learn's metrics)."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import f1_score


def classification(proba: np.ndarray, truth: np.ndarray) -> dict:
    """accuracy, F1 of the positive class (binary labels) and macro-F1."""
    pred = proba.argmax(axis=1)
    known = ~np.isnan(truth)
    pred, truth = pred[known], truth[known].astype(int)
    out = {"accuracy": float((pred == truth).mean()),
           "f1_macro": float(f1_score(truth, pred, average="macro"))}
    if proba.shape[1] == 2:
        out["f1"] = float(f1_score(truth, pred, pos_label=1))
    return out
